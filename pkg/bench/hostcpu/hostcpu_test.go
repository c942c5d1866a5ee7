package hostcpu

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     Sample
		err      bool
	}{
		{name: "full", in: "cpu  100 5 50 1000 20 3 7 11 0 0\ncpu0 50 2 25 500 10 1 3 5 0 0\n",
			want: Sample{Busy: 165 * tick, Idle: 1020 * tick, Steal: 11 * tick}},
		{name: "old kernel, four fields", in: "cpu 1 2 3 4\n", want: Sample{Busy: 6 * tick, Idle: 4 * tick}},
		{name: "per-cpu line first", in: "cpu0 1 2 3 4\n", err: true},
		{name: "too short", in: "cpu 1 2 3\n", err: true},
		{name: "not a number", in: "cpu 1 x 3 4\n", err: true},
		{name: "empty", in: "", err: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(c.in))
			if (err != nil) != c.err {
				t.Fatalf("err = %v, want error %v", err, c.err)
			}
			if got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestSub(t *testing.T) {
	a := Sample{Busy: 3 * time.Second, Idle: 5 * time.Second, Steal: time.Second}
	b := Sample{Busy: 1 * time.Second, Idle: 2 * time.Second}
	if got := a.Sub(b); got != (Sample{Busy: 2 * time.Second, Idle: 3 * time.Second, Steal: time.Second}) {
		t.Fatalf("Sub = %+v", got)
	}
}

// Read works on the machine the tests run on (Linux), and busy time does
// not go backwards.
func TestRead(t *testing.T) {
	a, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1e6; i++ {
		_ = i * i
	}
	b, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	if d := b.Sub(a); d.Busy < 0 || d.Idle < 0 || a.Busy+a.Idle == 0 {
		t.Fatalf("samples %+v then %+v", a, b)
	}
}
