package fusefs

import (
	"testing"
	"time"
)

func TestNoCaps(t *testing.T) {
	c := newNoCaps(time.Hour)
	if ok, _ := c.known(7); ok {
		t.Fatal("unknown file reported without capabilities")
	}
	_, gen := c.known(7)
	c.absent(7, gen)
	if ok, _ := c.known(7); !ok {
		t.Fatal("answer not remembered")
	}
	// A change through the mount forgets it, and an answer to a GETXATTR
	// that started before the change is not kept.
	_, old := c.known(8)
	c.changed(7)
	if ok, _ := c.known(7); ok {
		t.Fatal("answer kept over a change")
	}
	c.absent(8, old)
	if ok, _ := c.known(8); ok {
		t.Fatal("answer from before a change kept")
	}
	// Answers expire.
	c = newNoCaps(time.Millisecond)
	_, gen = c.known(9)
	c.absent(9, gen)
	time.Sleep(5 * time.Millisecond)
	if ok, _ := c.known(9); ok {
		t.Fatal("answer kept past its timeout")
	}
	// A timeout of 0 keeps nothing.
	c = newNoCaps(0)
	c.absent(9, 0)
	if ok, _ := c.known(9); ok {
		t.Fatal("answer kept with no timeout")
	}
}
