// Package freeport picks TCP ports for tests that must name a port before
// the program that listens on it starts (a Caddy config, a child process).
//
// Asking the kernel for port 0 and closing the listener returns a port from
// the ephemeral range, the same range every outgoing connection of every
// test process running meanwhile takes its source port from: between the
// pick and the bind, any of them may take it, and the bind then fails with
// "address already in use". So the port is drawn at random from below the
// ephemeral range, which the kernel never hands out by itself, and checked
// free by listening on it once. A program that picks several ports before
// any is bound (a Caddy config's HTTP, HTTPS and admin ports) would be
// handed the same free port twice now and then, so a port is handed out
// once per process.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// lowest is the bottom of the ports drawn from: above the registered
// services most machines run.
const lowest = 10000

// handedOut holds the ports TCP returned in this process.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// TCP returns a port on host (an IP address), and on each of more, that
// was free a moment ago, lies below the ephemeral range and was not
// returned before in this process: more names the other addresses a
// program will bind the port on (::1 beside 127.0.0.1).
func TCP(host string, more ...string) (int, error) {
	top := ephemeralStart()
	var last error
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	for range 100 {
		port := lowest + rand.IntN(top-lowest)
		if handedOut.ports[port] {
			continue
		}
		if last = free(port, append([]string{host}, more...)); last != nil {
			continue
		}
		handedOut.ports[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("freeport: no free port below %d on %s: %w", top, host, last)
}

// free listens on port at each of hosts at once, and reports the first
// that refused.
func free(port int, hosts []string) error {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for _, h := range hosts {
		ln, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
		if err != nil {
			return err
		}
		lns = append(lns, ln)
	}
	return nil
}

// ephemeralStart is the first port of the kernel's ephemeral range (Linux's
// ip_local_port_range), 32768 where it cannot be read.
func ephemeralStart() int {
	const fallback = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return fallback
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return fallback
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= lowest+1000 {
		return fallback
	}
	return n
}
