package talos

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
)

// The reader speaks COSI's State.Watch in its wire form, as it decodes the
// resources: COSI's generated API (every State call, and an HTTP gateway
// for them) and its client adapter (retries, a logging library, a registry
// of typed resources) would add over a megabyte to the agent for one call.
// wire_test.go holds these messages to COSI's generated ones.
const watchMethod = "/cosi.resource.State/Watch"

// kind is a resource kind machined serves: its namespace and type.
type kind struct{ namespace, typ string }

// eventType is a COSI event's type, numbered as COSI's EventType.
type eventType uint64

const (
	eventCreated eventType = iota
	eventUpdated
	eventDestroyed
	eventBootstrapped
	eventErrored
	eventNoop
)

// event is one of a watch's events, or the error that ended it.
type event struct {
	typ eventType
	// The resource's metadata and spec (for Created, Updated, Destroyed).
	namespace, resourceType, id string
	spec                        []byte
	// err is the stream's error, or an Errored event's.
	err error
}

// watchKind watches one kind on machined's COSI state service, its current
// resources first, and sends its events on events until the stream or ctx
// ends; the stream's end is an event with err set. It returns once machined
// has set the watch up. There are no retries: the reader reconnects itself
// and re-reads everything.
func watchKind(ctx context.Context, conn grpc.ClientConnInterface, k kind, events chan<- event) error {
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, watchMethod, grpc.ForceCodec(wireCodec{}))
	if err != nil {
		return err
	}
	if err := stream.SendMsg(watchRequest(k)); err != nil {
		return err
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	// Machined's first message is empty: the watch is set up.
	var msg []byte
	if err := stream.RecvMsg(&msg); err != nil {
		return err
	}
	go func() {
		for {
			err := stream.RecvMsg(&msg)
			var evs []event
			if err == nil {
				evs, err = watchResponse(msg)
			}
			if err != nil {
				send(ctx, events, event{err: fmt.Errorf("watching %s: %w", k.typ, err)})
				return
			}
			for _, e := range evs {
				if !send(ctx, events, e) {
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

// watchRequest is a WatchRequest for every resource of k, the current ones
// first (options.bootstrap_contents). API version 1 has machined send
// Bootstrapped and Errored events.
func watchRequest(k kind) []byte {
	var options []byte
	options = protowire.AppendTag(options, 1, protowire.VarintType)
	options = protowire.AppendVarint(options, 1)

	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, k.namespace)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, k.typ)
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendBytes(b, options)
	b = protowire.AppendTag(b, 5, protowire.VarintType)
	return protowire.AppendVarint(b, 1)
}

// watchResponse decodes a WatchResponse: its events (1).
func watchResponse(b []byte) ([]event, error) {
	var evs []event
	err := eachField(b, func(f field) error {
		if f.num != 1 {
			return nil
		}
		raw, err := f.message()
		if err != nil {
			return err
		}
		e, err := watchEvent(raw)
		if err != nil {
			return err
		}
		evs = append(evs, e)
		return nil
	})
	return evs, err
}

// watchEvent decodes an Event: its resource (1), type (2) and error (4).
func watchEvent(b []byte) (event, error) {
	var e event
	var msg string
	err := eachField(b, func(f field) error {
		switch f.num {
		case 1:
			raw, err := f.message()
			if err != nil {
				return err
			}
			return e.resource(raw)
		case 2:
			var typ uint64
			err := f.uint64(&typ)
			e.typ = eventType(typ)
			return err
		case 4:
			return f.string(&msg)
		}
		return nil
	})
	if e.typ == eventErrored {
		if msg == "" {
			msg = "watch failed"
		}
		e.err = errors.New(msg)
	}
	return e, err
}

// resource decodes a Resource: its metadata (1) and spec (2).
func (e *event) resource(b []byte) error {
	return eachField(b, func(f field) error {
		switch f.num {
		case 1:
			raw, err := f.message()
			if err != nil {
				return err
			}
			return e.metadata(raw)
		case 2:
			raw, err := f.message()
			if err != nil {
				return err
			}
			// The Spec's proto_spec (1); its yaml_spec (2) is for people.
			return eachField(raw, func(f field) error {
				if f.num == 1 {
					return f.bytes(&e.spec)
				}
				return nil
			})
		}
		return nil
	})
}

// metadata decodes a Metadata: its namespace (1), type (2) and id (3).
func (e *event) metadata(b []byte) error {
	return eachField(b, func(f field) error {
		switch f.num {
		case 1:
			return f.string(&e.namespace)
		case 2:
			return f.string(&e.resourceType)
		case 3:
			return f.string(&e.id)
		}
		return nil
	})
}

// wireCodec hands gRPC messages over in their wire form, a []byte each way.
type wireCodec struct{}

func (wireCodec) Name() string { return "proto" }

func (wireCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("wire codec: cannot send a %T", v)
	}
	return b, nil
}

func (wireCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("wire codec: cannot receive into a %T", v)
	}
	*b = data // gRPC hands over a copy
	return nil
}
