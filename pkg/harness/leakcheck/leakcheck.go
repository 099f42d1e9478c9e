// Package leakcheck fails a test, or a test binary, that leaves goroutines
// running after it returns: a controller, informer, certificate manager or
// command that is not stopped and waited for keeps reading process-wide
// state behind the next test's back.
package leakcheck

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// processOwned are goroutines that belong to the process, not to a test,
// matched anywhere in their stack including "created by": the test
// runner itself, klog's flush daemon, the harness's immortal fork thread
// (pkg/harness/spawn), idle keep-alive connections, and the client
// certificate file watchers client-go starts once per cached transport
// (transport.dynamicClientCert, its queue included), which live as long
// as its process-wide transport cache.
var processOwned = []string{
	"testing.(*T).Run", "testing.(*M).", "testing.runTests", "testing.tRunner",
	"runtime.goexit0", "os/signal.signal_recv", "os/signal.loop",
	"k8s.io/klog/v2.(*flushDaemon).run",
	"talos-nodeinit/pkg/harness/spawn.init",
	"net/http.(*persistConn).readLoop", "net/http.(*persistConn).writeLoop",
	"k8s.io/client-go/transport.(*dynamicClientCert)",
	"k8s.io/client-go/transport.(*tlsTransportCache).get",
}

// client-go leaves some goroutines parked for good. Each is allowed only as
// many times as the goroutine that explains it is there:
//   - each client-certificate file watcher (transport.dynamicClientCert,
//     process-owned above) has a delaying queue's loop and a poller's
//     ticker whose stacks do not name it: the transport cache keeps them
//     for the process's life (kubernetes/client-go#939);
//   - a stopped certificate manager's rotation loop sleeps until its next
//     rotation deadline without looking at its context (rotate's select in
//     util/certificate/certificate_manager.go, v0.37.2), and its run waits
//     for it. A manager never stopped also keeps its template loop, which
//     nothing allows, when it has one (a GetTemplate: kubeletsim's does);
//     one built with a fixed Template has none, and would pass for stopped.
//     No code here builds one.
const (
	certWatcher   = "\nk8s.io/client-go/transport.(*dynamicClientCert).run("
	queueLoop     = "k8s.io/client-go/util/workqueue.(*delayingType[...]).waitingLoop("
	pollTicker    = "k8s.io/apimachinery/pkg/util/wait.PollImmediateUntilWithContext.poller.func1.1("
	rotationSleep = "k8s.io/client-go/util/certificate.(*manager).run.func1("
	managerRun    = "\nk8s.io/client-go/util/certificate.(*manager).run("
	waitGroupWait = "sync.runtime_SemacquireWaitGroup("
)

// firstFrame is the function line at the top of goroutine g's stack.
func firstFrame(g string) string {
	_, rest, _ := strings.Cut(g, "\n")
	frame, _, _ := strings.Cut(rest, "\n")
	return frame
}

// goroutines returns every goroutine's stack but the caller's, the
// process-owned ones and the parked ones explained above, keyed by its id
// line.
func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	all := strings.Split(string(buf), "\n\n")[1:] // [0] is the caller
	watchers, sleeps := 0, 0
	for _, g := range all {
		if strings.Contains(g, certWatcher) {
			watchers++
		}
		if strings.HasPrefix(firstFrame(g), rotationSleep) {
			sleeps++
		}
	}
	allowed := map[string]int{queueLoop: watchers, pollTicker: watchers, rotationSleep: sleeps, managerRun: sleeps}
	out := map[string]string{}
	for _, g := range all {
		if slices.ContainsFunc(processOwned, func(s string) bool { return strings.Contains(g, s) }) {
			continue
		}
		kind := firstFrame(g)
		switch {
		case strings.HasPrefix(kind, waitGroupWait) && strings.Contains(g, managerRun):
			kind = managerRun
		case strings.HasPrefix(kind, queueLoop):
			kind = queueLoop
		case strings.HasPrefix(kind, pollTicker):
			kind = pollTicker
		case strings.HasPrefix(kind, rotationSleep):
			kind = rotationSleep
		}
		if allowed[kind] > 0 {
			allowed[kind]--
			continue
		}
		id, _, _ := strings.Cut(g, " [")
		out[id] = g
	}
	return out
}

// leftover waits up to 5 s for goroutines not in before to end (stopped
// goroutines may take a moment to return) and returns those still running.
func leftover(before map[string]string) []string {
	deadline := time.Now().Add(5 * time.Second)
	for {
		var left []string
		for id, g := range goroutines() {
			if _, ok := before[id]; !ok {
				left = append(left, g)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			slices.Sort(left)
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Check fails t when goroutines started during it are still running after
// it returns (and after its other cleanups ran): call it first in a test.
func Check(t testing.TB) {
	t.Helper()
	before := goroutines()
	t.Cleanup(func() {
		if left := leftover(before); len(left) > 0 {
			t.Errorf("the test left %d goroutines running:\n\n%s", len(left), strings.Join(left, "\n\n"))
		}
	})
}

// Find reports the goroutines still running beyond the process's own; a
// TestMain calls it after m.Run (and after stopping what it started).
func Find() error {
	if left := leftover(nil); len(left) > 0 {
		return fmt.Errorf("%d goroutines left running after the tests:\n\n%s", len(left), strings.Join(left, "\n\n"))
	}
	return nil
}
