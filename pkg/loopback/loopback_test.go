package loopback

import "testing"

// Servers reserved one at a time must not share a port: none of them has
// bound its port yet when the next is picked.
func TestFreePortsNeverRepeats(t *testing.T) {
	seen := map[string]bool{}
	for range 300 {
		ports, err := FreePorts(1)
		if err != nil {
			t.Fatal(err)
		}
		if seen[ports[0]] {
			t.Fatalf("port %s handed out twice", ports[0])
		}
		seen[ports[0]] = true
	}
}
