package talos

import (
	"context"
	"errors"
	"fmt"

	cosiv1alpha1 "github.com/cosi-project/runtime/api/v1alpha1"
)

// kind is a resource kind machined serves: its namespace and type.
type kind struct{ namespace, typ string }

// event is one of a watch's events, or the error that ended it.
type event struct {
	*cosiv1alpha1.Event
	err error
}

// watchKind watches one kind on machined's COSI state service, its current
// resources first, and sends its events on events until the stream or ctx
// ends; the stream's end is an event with err set. It returns once machined
// has set the watch up. This is COSI's own client adapter without its
// retries (the reader reconnects itself and re-reads everything) or its
// resource registry (the reader decodes specs from the wire), which link a
// logging library and COSI's typed resources into the agent.
func watchKind(ctx context.Context, c cosiv1alpha1.StateClient, k kind, events chan<- event) error {
	stream, err := c.Watch(ctx, &cosiv1alpha1.WatchRequest{
		Namespace: k.namespace,
		Type:      k.typ,
		Options:   &cosiv1alpha1.WatchOptions{BootstrapContents: true},
		// Version 1 has machined send Bootstrapped and Errored events.
		ApiVersion: 1,
	})
	if err != nil {
		return err
	}
	// Machined's first message is empty: the watch is set up.
	if _, err := stream.Recv(); err != nil {
		return err
	}
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				send(ctx, events, event{err: fmt.Errorf("watching %s: %w", k.typ, err)})
				return
			}
			for _, e := range msg.GetEvent() {
				if !send(ctx, events, event{Event: e}) {
					return
				}
			}
		}
	}()
	return nil
}

// send reports whether e was sent before ctx ended.
func send(ctx context.Context, events chan<- event, e event) bool {
	select {
	case events <- e:
		return true
	case <-ctx.Done():
		return false
	}
}

// watchError is an event's error: the stream's, or an Errored event's.
func (e event) watchError() error {
	if e.err != nil {
		return e.err
	}
	if msg := e.GetError(); msg != "" {
		return errors.New(msg)
	}
	return errors.New("watch failed")
}
