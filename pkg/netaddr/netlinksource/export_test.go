package netlinksource

import "errors"

// BreakSubscriptions makes every netlink subscription of s fail, as a
// kernel refusing them (ENOBUFS, a namespace gone) would.
func BreakSubscriptions(s *Source) {
	s.subscribeFn = func() (<-chan struct{}, <-chan error, chan struct{}, error) {
		return nil, nil, nil, errors.New("subscription refused")
	}
}
