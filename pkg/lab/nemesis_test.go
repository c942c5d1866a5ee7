package lab

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

func TestPlanNemesis(t *testing.T) {
	s := testState(t)
	for _, tc := range []struct {
		name string
		cfg  NemesisConfig
	}{
		{"one at a time", NemesisConfig{Seed: 1, Duration: 10 * time.Minute}},
		{"two at once", NemesisConfig{Seed: 2, Duration: 10 * time.Minute, MaxConcurrent: 2}},
		{"short, few kinds", NemesisConfig{Seed: 3, Duration: 90 * time.Second, Kinds: []FaultKind{KindKill, KindIsolate}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := PlanNemesis(s, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			again, _ := PlanNemesis(s, tc.cfg)
			if !reflect.DeepEqual(plan, again) {
				t.Fatal("the same seed gave another schedule")
			}
			kinds := tc.cfg.Kinds
			if len(kinds) == 0 {
				for _, k := range FaultKinds {
					kinds = append(kinds, k.Kind)
				}
			}
			seen := map[FaultKind]bool{}
			maxAt := max(tc.cfg.MaxConcurrent, 1)
			for i, p := range plan {
				seen[p.Spec.Kind] = true
				if !slices.Contains(kinds, p.Spec.Kind) {
					t.Errorf("fault %d: kind %s not asked for", i, p.Spec.Kind)
				}
				if p.At <= 0 || p.Heal <= p.At || p.Heal > tc.cfg.Duration {
					t.Errorf("fault %d (%s): [%v, %v) not within (0, %v]", i, p.Spec, p.At, p.Heal, tc.cfg.Duration)
				}
				if _, err := planFault(s, p.Spec, 1, time.Unix(0, 0)); err != nil {
					t.Errorf("fault %d: %v", i, err)
				}
				var together []Planned
				for _, q := range plan {
					if q.At <= p.At && p.At < q.Heal {
						together = append(together, q)
					}
				}
				if len(together) > maxAt {
					t.Errorf("at %v: %d faults in force, at most %d wanted", p.At, len(together), maxAt)
				}
				hosts := map[string]bool{}
				for _, q := range together {
					if len(together) > 1 && isWide(q.Spec.Kind) {
						t.Errorf("at %v: %s runs beside other faults", p.At, q.Spec)
					}
					for _, h := range q.Hosts {
						if hosts[h] {
							t.Errorf("at %v: host %s in two faults in force", p.At, h)
						}
						hosts[h] = true
					}
				}
			}
			if tc.cfg.Duration >= 10*time.Minute {
				for _, k := range kinds {
					if !seen[k] {
						t.Errorf("no %s fault in %v", k, tc.cfg.Duration)
					}
				}
			}
		})
	}
}

func TestPlanNemesisRefuses(t *testing.T) {
	s := testState(t)
	for _, cfg := range []NemesisConfig{
		{Duration: 0},
		{Duration: time.Minute, Kinds: []FaultKind{"flood"}},
	} {
		if _, err := PlanNemesis(s, cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
	s.Hosts = slices.DeleteFunc(s.Hosts, func(h Host) bool { return h.SmallDisk })
	if _, err := PlanNemesis(s, NemesisConfig{Duration: time.Minute, Kinds: []FaultKind{KindDiskFull}}); err == nil {
		t.Error("disk-full without a small disk: no error")
	}
}
