package dataclient

import (
	"testing"
	"time"
)

// keepSmall is a compare-and-set on the small files' partition: a writer
// installs its pick only over the choice it read, or over a lapsed one.
func TestKeepSmall(t *testing.T) {
	tests := []struct {
		name       string
		small      uint64
		lapsed     bool
		read, pick uint64
		want       uint64
	}{
		{"first pick", 0, true, 0, 7, 7},
		{"the same pick keeps its window", 7, false, 7, 7, 7},
		{"moved off the partition it read", 7, false, 7, 9, 9},
		{"another writer moved first: its pick stands", 8, false, 7, 9, 8},
		{"another writer picked after a lapse: its pick stands", 8, false, 0, 9, 8},
		{"lapsed: any pick goes", 8, true, 8, 9, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Client{opts: Options{SmallStickiness: time.Minute}}
			c.small, c.smallUntil = tt.small, time.Now().Add(time.Minute)
			if tt.lapsed {
				c.smallUntil = time.Now().Add(-time.Second)
			}
			until := c.smallUntil
			c.keepSmall(tt.read, tt.pick)
			if got := c.smallPartition(); got != tt.want {
				t.Fatalf("kept partition %d, want %d", got, tt.want)
			}
			if tt.small == tt.pick && !tt.lapsed && !c.smallUntil.Equal(until) {
				t.Fatal("keeping the same partition moved its window")
			}
		})
	}
}
