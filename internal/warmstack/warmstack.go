// Package warmstack runs a function on a goroutine that is kept after its
// work, so the next call finds its stack already grown.
//
// Why: net/http and its HTTP/2 server start a fresh goroutine, with the
// runtime's smallest stack, for every request. An ACME request then goes
// deep — Caddy's middleware chain, the JWS check, an ECDSA verification
// (whose big-number code keeps whole numbers on the stack), SQLite's
// interpreter — and the runtime grows that stack two or three times,
// copying it and rewriting every frame's pointers each time. Under the
// issuance benchmark that copying was ~5 % of the server process's CPU,
// about 50 µs a request. A goroutine that has served one request keeps
// the stack it grew (until the garbage collector shrinks an idle one), so
// handing the request to such a goroutine and waiting costs two wake-ups
// instead.
//
// The pool never queues: a call that finds no idle goroutine starts one,
// so a request that waits (a validation, a relayed finalize) never holds
// up another. A goroutine idle for the pool's idle time exits.
package warmstack

import (
	"fmt"
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"time"
)

// DefaultIdle is how long an idle goroutine waits for work before it
// exits, unless the Pool says otherwise.
const DefaultIdle = 10 * time.Second

// Pool is a set of goroutines that run calls for their callers. The zero
// value is ready to use.
type Pool struct {
	Idle time.Duration // how long an idle goroutine waits; DefaultIdle if zero

	mu   sync.Mutex
	idle []*worker // last in, first out: the warmest goroutine serves next
}

// worker is one of the pool's goroutines, reached through its own channel.
type worker struct {
	calls chan *call // holds one: the call of whoever took the worker off the idle list
}

type call struct {
	f      func()
	done   chan struct{}
	panic  any  // what f panicked with, re-raised in the caller
	goexit bool // f ended its goroutine (runtime.Goexit): the caller's ends too
	ok     bool
}

var calls = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// Run calls f on one of the pool's goroutines and returns when f has
// returned. A panic in f is raised again in the caller's goroutine, so the
// caller's recovery (net/http's, Caddy's) sees it as if f had run there:
// http.ErrAbortHandler as itself, any other value as a *Panic that
// carries the stack where f panicked.
func (p *Pool) Run(f func()) {
	c := calls.Get().(*call)
	c.f, c.panic, c.goexit, c.ok = f, nil, false, false
	p.mu.Lock()
	var w *worker
	if n := len(p.idle); n > 0 {
		w = p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
	}
	p.mu.Unlock()
	if w == nil {
		w = &worker{calls: make(chan *call, 1)}
		go p.serve(w)
	}
	w.calls <- c
	<-c.done
	pv, ok, goexit := c.panic, c.ok, c.goexit
	c.f, c.panic = nil, nil
	calls.Put(c)
	switch {
	case goexit:
		runtime.Goexit()
	case !ok:
		panic(pv)
	}
}

// Panic is what Run raises in its caller for a panic in the function
// (but http.ErrAbortHandler, raised as itself): the value and the stack
// of the pool's goroutine where it was raised, which the caller's own
// stack does not show.
type Panic struct {
	Value any
	Stack []byte
}

func (p *Panic) Error() string { return fmt.Sprintf("%v\n\n%s", p.Value, p.Stack) }

// Unwrap is the value, when it is an error.
func (p *Panic) Unwrap() error {
	err, _ := p.Value.(error)
	return err
}

// serve runs the calls handed to w until w has been idle for the pool's
// idle time. w goes back on the idle list before its caller is told, so
// that a caller's next call finds it there — only once its call has
// returned: a call whose function ends the goroutine (runtime.Goexit,
// even with a panic recovered on the way) is answered by the deferred
// function instead, and w is never handed out again.
func (p *Pool) serve(w *worker) {
	var current *call
	defer func() {
		if current != nil {
			current.goexit = true
			current.done <- struct{}{}
		}
	}()
	wait := p.Idle
	if wait <= 0 {
		wait = DefaultIdle
	}
	idle := time.NewTimer(wait)
	defer idle.Stop()
	for {
		select {
		case c := <-w.calls:
			current = c
			c.run()
			current = nil
			p.mu.Lock()
			p.idle = append(p.idle, w)
			p.mu.Unlock()
			c.done <- struct{}{}
			idle.Reset(wait)
		case <-idle.C:
			if p.retire(w) {
				return
			}
			idle.Reset(wait) // taken meanwhile: its call is on the way
		}
	}
}

// run calls c.f and keeps what it panicked with, if it did.
func (c *call) run() {
	defer func() {
		if c.ok {
			return
		}
		switch v := recover(); v {
		case http.ErrAbortHandler:
			c.panic = v
		default:
			c.panic = &Panic{Value: v, Stack: debug.Stack()}
		}
	}()
	c.f()
	c.ok = true
}

// retire takes w off the idle list, unless a caller has taken it already.
func (p *Pool) retire(w *worker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, v := range p.idle {
		if v == w {
			p.idle = slices.Delete(p.idle, i, i+1)
			return true
		}
	}
	return false
}
