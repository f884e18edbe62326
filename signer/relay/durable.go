package relay

import (
	"context"
)

// recordGate is what an attempt waits for before it finalizes an upstream
// order it placed: the relay's mapping, naming that order, durable. A
// restart after a power loss then always finds the upstream order a
// finalize was posted for, and relays it rather than placing and
// finalizing a second one for the same local order. The durable write
// runs beside the upstream requests that come before the finalize
// (answering the upstream's challenges), so that its fsync is not on the
// relay's path.
type recordGate struct {
	done chan struct{}
	url  string // the upstream order the mapping names once durable
	err  error
}

// startRecord runs write, which makes the mapping durable and returns the
// upstream order it names, in a goroutine of its own.
func startRecord(write func() (string, error)) *recordGate {
	g := &recordGate{done: make(chan struct{})}
	go func() {
		defer close(g.done)
		g.url, g.err = write()
	}()
	return g
}

// wait returns what the write recorded, once it is durable.
func (g *recordGate) wait(ctx context.Context) (string, error) {
	select {
	case <-g.done:
		return g.url, g.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// finish waits for the write to end, however the attempt ended: an
// attempt leaves nothing running behind it. A nil gate is finished.
func (g *recordGate) finish() {
	if g != nil {
		<-g.done
	}
}
