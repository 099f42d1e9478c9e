package controller

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// The order joinsFirst hands keys out: every queued key exactly once, the
// urgent ones first but never more than restEvery in a row while others
// wait, each class in the order it was queued in (a key moved ahead by
// Touch counts from its move), under any sequence of pushes, touches, pops
// and changes of urgency.
func TestJoinsFirstOrder(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 1))
		urgent := map[string]bool{}
		q := newJoinsFirst(func(k string) bool { return urgent[k] })
		// The model: the keys queued, each with its class and its place.
		type entry struct {
			first bool
			at    int
		}
		model, clock, streak := map[string]entry{}, 0, 0
		for range 400 {
			k := fmt.Sprintf("n%d", r.IntN(4+int(seed%40)))
			switch op := r.IntN(10); {
			case op < 2:
				urgent[k] = !urgent[k]
			case op < 5: // the workqueue pushes a key not queued, touches one queued
				clock++
				if e, queued := model[k]; !queued {
					q.Push(k)
					model[k] = entry{urgent[k], clock}
				} else {
					q.Touch(k)
					if !e.first && urgent[k] {
						model[k] = entry{true, clock}
					}
				}
			default:
				if q.Len() != len(model) {
					t.Fatalf("seed %d: Len %d, want %d", seed, q.Len(), len(model))
				}
				if len(model) == 0 {
					continue
				}
				var firsts, rests []string
				for key, e := range model {
					if e.first {
						firsts = append(firsts, key)
					} else {
						rests = append(rests, key)
					}
				}
				oldest := func(keys []string) string {
					return slices.MinFunc(keys, func(a, b string) int { return model[a].at - model[b].at })
				}
				var want string
				if len(rests) > 0 && (len(firsts) == 0 || streak >= restEvery) {
					want, streak = oldest(rests), 0
				} else {
					want = oldest(firsts)
					streak++
				}
				if got := q.Pop(); got != want {
					t.Fatalf("seed %d: popped %s, want %s (queued %v)", seed, got, want, model)
				}
				delete(model, want)
			}
		}
	}
}

// A key moved ahead, handed out, then queued again behind another: its
// stale entry must not pass for the new one.
func TestJoinsFirstStaleEntry(t *testing.T) {
	urgent := map[string]bool{}
	q := newJoinsFirst(func(k string) bool { return urgent[k] })
	q.Push("k")
	q.Push("m")
	urgent["k"] = true
	q.Touch("k")
	if got := q.Pop(); got != "k" {
		t.Fatalf("popped %s, want k (moved ahead)", got)
	}
	urgent["k"] = false
	q.Push("k")
	for _, want := range []string{"m", "k"} {
		if got := q.Pop(); got != want {
			t.Fatalf("popped %s, want %s", got, want)
		}
	}
	if q.Len() != 0 {
		t.Errorf("Len %d after every key went", q.Len())
	}
}

// Urgent keys that keep coming never hold the rest back for more than
// restEvery of them.
func TestJoinsFirstNeverStarvesTheRest(t *testing.T) {
	q := newJoinsFirst(func(k string) bool { return k[0] == 'u' })
	q.Push("rest")
	for i := range restEvery + 1 {
		q.Push(fmt.Sprintf("u%d", i))
	}
	for i := range restEvery {
		if got := q.Pop(); got != fmt.Sprintf("u%d", i) {
			t.Fatalf("pop %d: %s", i, got)
		}
		q.Push(fmt.Sprintf("u%d", i)) // it changes again at once
	}
	if got := q.Pop(); got != "rest" {
		t.Errorf("after %d urgent keys in a row popped %s, want the waiting one", restEvery, got)
	}
}
