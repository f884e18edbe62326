package signer

import (
	"errors"
	"fmt"
	"sync"

	"go.uber.org/zap"
)

// Bound keeps the Binding of a signer that finishes later (Binder): set
// once by Bind, read by the signer's durable work. The zero value is
// unbound; it is safe for concurrent use.
type Bound struct {
	mu  sync.Mutex
	b   *Binding
	log *zap.Logger
}

// Bind records b for the signer called name ("relay", "script"), once.
func (h *Bound) Bind(name string, b Binding) error {
	if b.Profile == "" || b.Settler == nil || b.Queue == nil || b.DB == nil {
		return errors.New(name + ": a binding needs a profile, a settler, a queue and a store")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.b != nil {
		return fmt.Errorf("%s: already bound to profile %q", name, h.b.Profile)
	}
	h.b = &b
	if b.Logger != nil {
		h.log = b.Logger.Named(name)
	}
	return nil
}

// Get returns the binding and the signer's logger, or an error naming
// the signer when it is not bound yet.
func (h *Bound) Get(name string) (*Binding, *zap.Logger, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.b == nil {
		return nil, h.logger(), errors.New(name + ": the signer is not bound to a profile")
	}
	return h.b, h.logger(), nil
}

// Logger is the signer's logger: the binding's, named; a no-op before.
func (h *Bound) Logger() *zap.Logger {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.logger()
}

func (h *Bound) logger() *zap.Logger {
	if h.log == nil {
		return zap.NewNop()
	}
	return h.log
}

// Profile is the bound profile's name, "" before Bind.
func (h *Bound) Profile() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.b == nil {
		return ""
	}
	return h.b.Profile
}
