package main

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestZones(t *testing.T) {
	nodes := []statusNode{
		{Role: "master", Zone: "", State: "down"},
		{Role: "meta", Zone: "z1", State: "alive"}, {Role: "data", Zone: "z1", State: "alive"},
		{Role: "meta", Zone: "z2", State: "down"}, {Role: "data", Zone: "z2", State: "out"},
		{Role: "meta", Zone: "z3", State: "alive"}, {Role: "data", Zone: "z3", State: "down"},
	}
	want := []statusZone{{"z1", 2, 2, false}, {"z2", 2, 0, true}, {"z3", 2, 1, false}}
	got := zonesOf(nodes)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("zones %+v, want %+v", got, want)
	}
	rule := zoneRule(got, 10*time.Minute)
	for _, part := range []string{"zone z2 down", "2 zones", "10m0s", "spread over the zones again"} {
		if !strings.Contains(rule, part) {
			t.Errorf("rule %q does not say %q", rule, part)
		}
	}
	if r := zoneRule(zonesOf(nodes[:3]), time.Minute); r != "" {
		t.Errorf("no zone down, yet a rule: %q", r)
	}
	if z := zonesOf([]statusNode{{Role: "meta", State: "alive"}}); z != nil {
		t.Errorf("nodes without zones: %+v", z)
	}
}
