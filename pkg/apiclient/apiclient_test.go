package apiclient

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

func TestBuiltin(t *testing.T) {
	in := &rest.Config{Host: "https://127.0.0.1:6443", QPS: 7}
	out := Builtin(in)
	if out.ContentType != runtime.ContentTypeProtobuf || out.AcceptContentTypes != runtime.ContentTypeProtobuf+","+runtime.ContentTypeJSON {
		t.Errorf("content types %q, %q: want protobuf, JSON as a fallback", out.ContentType, out.AcceptContentTypes)
	}
	if !out.DisableCompression {
		t.Error("gzip still asked for")
	}
	if out.Host != in.Host || out.QPS != in.QPS {
		t.Errorf("the rest of the config was not kept: %+v", out)
	}
	if in.ContentType != "" || in.DisableCompression {
		t.Errorf("the caller's config was changed: %+v", in)
	}
}

func TestCustom(t *testing.T) {
	in := &rest.Config{Host: "https://127.0.0.1:6443"}
	in.ContentType = runtime.ContentTypeJSON
	out := Custom(in)
	if !out.DisableCompression || out.ContentType != runtime.ContentTypeJSON || out.Host != in.Host {
		t.Errorf("got %+v: want JSON without gzip, the rest kept", out)
	}
	if in.DisableCompression {
		t.Error("the caller's config was changed")
	}
}
