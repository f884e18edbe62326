package warmstack

import (
	"errors"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRunReturnsAfterTheFunctionHasRun(t *testing.T) {
	var p Pool
	ran := false
	p.Run(func() { ran = true })
	if !ran {
		t.Fatal("Run returned before its function ran")
	}
}

func TestAPanicInTheFunctionIsRaisedInTheCallerWithItsValueAndStack(t *testing.T) {
	var p Pool
	boom := errors.New("boom")
	got := func() (v any) {
		defer func() { v = recover() }()
		p.Run(func() { panicsWith(boom) })
		return nil
	}()
	pe, ok := got.(*Panic)
	if !ok {
		t.Fatalf("the caller recovered %T %v; want a *Panic", got, got)
	}
	if !errors.Is(pe, boom) || pe.Value != boom {
		t.Errorf("the *Panic holds %v; want the function's panic value", pe.Value)
	}
	if !strings.Contains(string(pe.Stack), "panicsWith") {
		t.Errorf("the *Panic's stack does not show where the function panicked:\n%s", pe.Stack)
	}
	// The pool still serves after a panic.
	ran := false
	p.Run(func() { ran = true })
	if !ran {
		t.Fatal("the pool did not run a function after a panic")
	}
}

//go:noinline
func panicsWith(v any) { panic(v) }

// net/http stops serving a request quietly on http.ErrAbortHandler, which
// it compares by identity: the caller gets that very value.
func TestAnAbortedHandlerIsRaisedInTheCallerAsItself(t *testing.T) {
	var p Pool
	got := func() (v any) {
		defer func() { v = recover() }()
		p.Run(func() { panic(http.ErrAbortHandler) })
		return nil
	}()
	if got != http.ErrAbortHandler {
		t.Fatalf("the caller recovered %v; want http.ErrAbortHandler itself", got)
	}
}

// A function that ends its goroutine (runtime.Goexit, as t.FailNow does)
// ends the caller's as well, and the pool goes on serving without that
// goroutine — also when a deferred function of the call panics on the
// way out and the pool recovers it (Goexit goes on regardless).
func TestAGoexitInTheFunctionEndsTheCallersGoroutine(t *testing.T) {
	cases := []struct {
		name string
		f    func()
	}{
		{"a plain Goexit", runtime.Goexit},
		{"a Goexit whose deferred function panics", func() {
			defer panicsWith("on the way out")
			runtime.Goexit()
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var p Pool
			returned := make(chan bool)
			go func() {
				defer func() { recover(); returned <- false }()
				p.Run(c.f)
				returned <- true
			}()
			if <-returned {
				t.Fatal("Run returned after its function called runtime.Goexit")
			}
			done := make(chan struct{})
			go func() { p.Run(func() {}); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("a call after a Goexit was handed to the goroutine that exited")
			}
		})
	}
}

// Calls that wait for each other all run at once: a call that finds no
// idle goroutine gets a new one instead of a place in a queue.
func TestCallsThatWaitForEachOtherAllRunAtOnce(t *testing.T) {
	var p Pool
	const n = 50
	var arrived sync.WaitGroup
	arrived.Add(n)
	done := make(chan struct{})
	for range n {
		go p.Run(func() {
			arrived.Done()
			arrived.Wait() // returns only once all n are running
		})
	}
	go func() { arrived.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the calls did not all run at once: some were queued behind others")
	}
}

// A goroutine that has run a call runs the next one: sequential calls do
// not start a goroutine each.
func TestSequentialCallsRunOnOneGoroutine(t *testing.T) {
	var p Pool
	ids := map[string]int{}
	for range 100 {
		p.Run(func() { ids[goroutineID()]++ })
	}
	if len(ids) != 1 {
		t.Fatalf("100 sequential calls ran on %d goroutines; want 1", len(ids))
	}
}

// goroutineID is the number runtime.Stack prints for the calling
// goroutine ("goroutine 7 [running]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := strings.Fields(string(buf))
	return f[1]
}

func TestAnIdleGoroutineExits(t *testing.T) {
	p := Pool{Idle: 10 * time.Millisecond}
	before := runtime.NumGoroutine()
	p.Run(func() {})
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines 10s after the call; %d before it", runtime.NumGoroutine(), before)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// deep recurses with a frame of ~1 KiB, as a request's handlers do
// (middleware, a JWS check, an ECDSA verification's big numbers,
// SQLite's interpreter): enough to grow a new goroutine's stack several
// times.
//
//go:noinline
func deep(n int) byte {
	var buf [1024]byte
	buf[n%len(buf)] = byte(n)
	if n == 0 {
		return buf[0]
	}
	return deep(n-1) + buf[n%len(buf)]
}

var sink byte

// BenchmarkDeepCall compares a deep call on a fresh goroutine each time
// (what net/http does for every request) with the same call through a
// Pool.
func BenchmarkDeepCall(b *testing.B) {
	b.Run("fresh goroutine", func(b *testing.B) {
		done := make(chan byte)
		for b.Loop() {
			go func() { done <- deep(48) }()
			sink = <-done
		}
	})
	b.Run("fresh goroutine through the pool", func(b *testing.B) {
		var p Pool
		done := make(chan byte)
		for b.Loop() {
			go func() {
				var v byte
				p.Run(func() { v = deep(48) })
				done <- v
			}()
			sink = <-done
		}
	})
}
