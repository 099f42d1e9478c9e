// Package suggest finds what a user probably meant: the known word nearest
// to a misspelt one, for error messages that say "did you mean …?".
package suggest

import "strings"

// Nearest returns the candidate closest to word by case-insensitive edit
// distance, and that distance; the first wins a tie. It returns "", -1 when
// there are no candidates.
func Nearest(word string, candidates []string) (string, int) {
	best, bestDist := "", -1
	for _, c := range candidates {
		if d := Distance(word, c); bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	return best, bestDist
}

// Typo returns the candidate nearest to word when it is close enough to be
// a likely typo: at most 2 edits, or a third of word's length if longer.
func Typo(word string, candidates []string) (string, bool) {
	best, d := Nearest(word, candidates)
	return best, d >= 0 && d <= max(2, len(word)/3)
}

// Distance is the case-insensitive Levenshtein distance between a and b,
// by rune.
func Distance(a, b string) int {
	ra, rb := []rune(strings.ToLower(a)), []rune(strings.ToLower(b))
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
