package docker

import (
	"io"
	"net"
	"os"
	"testing"
)

// listenIn makes a listener in the namespace it is given that kiln serves from its own:
// here the process's own namespace, entered and left as a sandbox's is. (Entering a
// container's is in test/egress, against real sandboxes.)
func TestListenInANamespace(t *testing.T) {
	if err := probeNetns(); err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("not root: %v", err)
		}
		t.Fatalf("root cannot enter its own network namespace: %v", err)
	}
	for range 3 { // the thread goes back each time: the next entry starts from kiln's own
		ln, err := listenIn("/proc/self/ns/net", 0)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			c, err := ln.Accept()
			if err == nil {
				c.Write([]byte("kiln"))
				c.Close()
			}
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(c)
		c.Close()
		ln.Close()
		if string(got) != "kiln" || ln.Addr().(*net.TCPAddr).IP.String() != "127.0.0.1" {
			t.Fatalf("got %q from %s, want kiln from 127.0.0.1", got, ln.Addr())
		}
	}
	if _, err := listenIn("/proc/self/ns/nothing", 0); err == nil {
		t.Error("a namespace that does not exist gave a listener")
	}
}
