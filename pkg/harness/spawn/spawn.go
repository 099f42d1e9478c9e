// Package spawn starts test processes from one OS thread that never exits.
// Children started with Pdeathsig are killed when the *thread* that forked
// them dies, and Go may retire a thread (for example after a goroutine
// locked to it for network-namespace work returns); forking every child on
// this dedicated, immortal thread keeps Pdeathsig tied to the test binary.
package spawn

import "runtime"

var work = func() chan func() {
	work := make(chan func())
	go func() {
		runtime.LockOSThread() // never unlocked: this thread must outlive every child
		for fn := range work {
			fn()
		}
	}()
	return work
}()

// Do runs fn on the immortal thread and waits for it.
func Do(fn func()) {
	done := make(chan struct{})
	work <- func() { fn(); close(done) }
	<-done
}
