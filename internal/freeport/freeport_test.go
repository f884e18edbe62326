package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestAPickedPortLiesBelowTheEphemeralRangeAndCanBeListenedOn(t *testing.T) {
	for range 20 {
		port, err := TCP("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if port < lowest || port >= ephemeralStart() {
			t.Fatalf("port %d outside [%d, %d)", port, lowest, ephemeralStart())
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("port %d was returned free but cannot be listened on: %v", port, err)
		}
		ln.Close()
	}
}

func TestAPortIsHandedOutOncePerProcessThoughItIsFreeAgain(t *testing.T) {
	seen := map[int]bool{}
	for range 500 {
		port, err := TCP("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
	}
}
