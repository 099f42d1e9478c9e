package controller

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// The order joinsFirst hands keys out: every queued key exactly once, the
// urgent ones first, each class in the order it was queued in (a key moved
// ahead by Touch counts from its move), under any sequence of pushes,
// touches, pops and changes of urgency.
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
		model, clock := map[string]entry{}, 0
		for range 400 {
			k := fmt.Sprintf("n%d", r.IntN(20))
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
				keys := make([]string, 0, len(model))
				for key := range model {
					keys = append(keys, key)
				}
				want := slices.MinFunc(keys, func(a, b string) int {
					ea, eb := model[a], model[b]
					if ea.first != eb.first {
						if ea.first {
							return -1
						}
						return 1
					}
					return ea.at - eb.at
				})
				if got := q.Pop(); got != want {
					t.Fatalf("seed %d: popped %s, want %s (queued %v)", seed, got, want, model)
				}
				delete(model, want)
			}
		}
	}
}
