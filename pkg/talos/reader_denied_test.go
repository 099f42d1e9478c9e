package talos

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A socket the kernel refuses at connect is a setting to fix, said once at
// Warn; a socket not there yet, or machined's own refusal, is something else.
func TestSocketDenied(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"EACCES from connect", &os.SyscallError{Syscall: "connect", Err: syscall.EACCES}, true},
		{"as gRPC reports it", status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial unix //system/run/machined/machine.sock: connect: permission denied"`), true},
		{"wrapped", fmt.Errorf("watching PlatformMetadatas.talos.dev: %w", &os.SyscallError{Syscall: "connect", Err: syscall.EACCES}), true},
		{"no socket yet", &os.SyscallError{Syscall: "connect", Err: syscall.ENOENT}, false},
		{"machined's refusal", status.Error(codes.PermissionDenied, "not an extension service"), false},
		{"nil", nil, false},
		{"other", errors.New("EOF"), false},
	} {
		if got := SocketDenied(c.err) != ""; got != c.want {
			t.Errorf("%s: SocketDenied = %t, want %t", c.name, got, c.want)
		}
	}
}
