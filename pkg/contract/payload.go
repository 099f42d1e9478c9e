package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// PayloadVersion is the version this build writes and the only one it reads.
// Additive, optional fields keep the version; anything else bumps it, and a
// reader refuses a version it does not know instead of guessing.
const PayloadVersion = 1

// MaxPayloadBytes bounds every annotation a reader accepts. Nodes write these
// annotations themselves, so a reader must not trust their size.
const MaxPayloadBytes = 64 << 10

var (
	// ErrUnsupportedVersion is returned for a payload whose "v" this build does not know.
	ErrUnsupportedVersion = errors.New("unsupported payload version")
	// ErrTooLarge is returned for a payload over MaxPayloadBytes.
	ErrTooLarge = errors.New("payload too large")
)

// versioned is implemented by every wire struct: it carries the "v" field.
type versioned interface{ version() int }

// encode marshals a wire struct. encoding/json sorts map keys and the callers
// normalise slices, so equal facts give byte-identical annotations.
func encode(w any) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(w); err != nil {
		return "", err
	}
	return string(bytes.TrimRight(buf.Bytes(), "\n")), nil
}

// decode unmarshals a wire struct, checking size and version first.
func decode[W versioned](key, value string) (W, error) {
	var w W
	if len(value) > MaxPayloadBytes {
		return w, fmt.Errorf("%s: %w: %d bytes, limit %d", key, ErrTooLarge, len(value), MaxPayloadBytes)
	}
	var probe struct {
		V *int `json:"v"`
	}
	if err := json.Unmarshal([]byte(value), &probe); err != nil {
		return w, fmt.Errorf("%s: not valid JSON: %w", key, err)
	}
	if probe.V == nil {
		return w, fmt.Errorf("%s: %w: the \"v\" field is missing", key, ErrUnsupportedVersion)
	}
	if *probe.V != PayloadVersion {
		return w, fmt.Errorf("%s: %w %d (this build reads %d)", key, ErrUnsupportedVersion, *probe.V, PayloadVersion)
	}
	if err := json.Unmarshal([]byte(value), &w); err != nil {
		return w, fmt.Errorf("%s: %w", key, err)
	}
	return w, nil
}
