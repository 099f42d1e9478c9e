package main

import (
	"strings"
	"testing"
)

func TestRequestsPerNode(t *testing.T) {
	before := parseRequests([]byte(`# HELP apiserver_request_total x
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="status",verb="PATCH",version="v1"} 10
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="",verb="POST",version="v1"} 4
`))
	after := parseRequests([]byte(`apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="status",verb="PATCH",version="v1"} 30
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="status",verb="PATCH",version="v1"} 2
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="",verb="POST",version="v1"} 24
apiserver_request_total_bogus{verb="GET"} 99
`))
	if after["PATCH nodes/status"] != 32 || after["POST nodes"] != 24 || len(after) != 2 {
		t.Fatalf("parsed %v", after)
	}
	var w strings.Builder
	printRequests(&w, before, after, 20)
	want := "2.1/node\n      PATCH nodes/status                            1.10/node\n      POST nodes                                    1.00/node\n"
	if !strings.HasSuffix(w.String(), want) {
		t.Errorf("printed\n%s\nwant it to end with\n%s", w.String(), want)
	}
}
