package talos

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	cosiv1alpha1 "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/protobuf"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"google.golang.org/protobuf/proto"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
)

// The reader names machined's kinds and its API's requirements itself;
// they must stay machinery's.
func TestWireNamesAreMachinerys(t *testing.T) {
	for _, tc := range []struct{ ours, machinerys string }{
		{runtimeNamespace, runtime.NamespaceName},
		{platformMetadataType, runtime.PlatformMetadataType},
		{hardwareNamespace, hardware.NamespaceName},
		{systemInformationType, hardware.SystemInformationType},
		{k8sNamespace, k8s.NamespaceName},
		{nodenameType, k8s.NodenameType},
		{nodeIPType, k8s.NodeIPType},
		{nodeIPConfigType, k8s.NodeIPConfigType},
		{kubeletID, k8s.KubeletID},
		{networkNamespace, network.NamespaceName},
		{addressStatusType, network.AddressStatusType},
		{roleMetadataKey, constants.APIAuthzRoleMetadataKey},
		{readerRole, string(role.Reader)},
	} {
		if tc.ours != tc.machinerys {
			t.Errorf("the reader says %q where machinery says %q", tc.ours, tc.machinerys)
		}
	}
	if maxMessageSize != constants.GRPCMaxMessageSize {
		t.Errorf("the reader takes messages up to %d bytes, machined sends up to %d", maxMessageSize, constants.GRPCMaxMessageSize)
	}
}

// The reader's COSI watch must stay COSI's.
func TestWatchIsCOSIs(t *testing.T) {
	if watchMethod != cosiv1alpha1.State_Watch_FullMethodName {
		t.Errorf("the reader calls %s, COSI serves %s", watchMethod, cosiv1alpha1.State_Watch_FullMethodName)
	}
	for ours, cosis := range map[eventType]cosiv1alpha1.EventType{
		eventCreated: cosiv1alpha1.EventType_CREATED, eventUpdated: cosiv1alpha1.EventType_UPDATED,
		eventDestroyed: cosiv1alpha1.EventType_DESTROYED, eventBootstrapped: cosiv1alpha1.EventType_BOOTSTRAPPED,
		eventErrored: cosiv1alpha1.EventType_ERRORED, eventNoop: cosiv1alpha1.EventType_NOOP,
	} {
		if uint64(ours) != uint64(cosis) {
			t.Errorf("the reader numbers %s %d, COSI %d", cosis, ours, cosis)
		}
	}
	var req cosiv1alpha1.WatchRequest
	if err := proto.Unmarshal(watchRequest(kind{k8sNamespace, nodenameType}), &req); err != nil {
		t.Fatal(err)
	}
	want := &cosiv1alpha1.WatchRequest{
		Namespace: k8sNamespace, Type: nodenameType,
		Options:    &cosiv1alpha1.WatchOptions{BootstrapContents: true},
		ApiVersion: 1,
	}
	if !proto.Equal(&req, want) {
		t.Errorf("the reader's WatchRequest reads as\n%v\nwant\n%v", &req, want)
	}
}

// wire is a machinery resource as machined sends it.
func wire(t testing.TB, r resource.Resource) *cosiv1alpha1.Resource {
	t.Helper()
	pr, err := protobuf.FromResource(r)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pr.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// response is a WatchResponse of events of typ for machinery resources,
// encoded by COSI's generated code, as machined sends it.
func response(t testing.TB, typ cosiv1alpha1.EventType, rs ...resource.Resource) []byte {
	t.Helper()
	var msg cosiv1alpha1.WatchResponse
	for _, r := range rs {
		w := wire(t, r)
		w.Metadata.Labels = map[string]string{"a": "b"} // fields the reader skips
		msg.Event = append(msg.Event, &cosiv1alpha1.Event{EventType: typ, Resource: w, Old: w, Bookmark: []byte("b")})
	}
	b, err := proto.Marshal(&msg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// applyResponse applies a WatchResponse's events to s.
func applyResponse(t testing.TB, s *snapshot, msg []byte) {
	t.Helper()
	evs, err := watchResponse(msg)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if err := s.apply(e, new(int)); err != nil {
			t.Fatalf("%s %s: %v", e.resourceType, e.id, err)
		}
	}
}

// filled is a T with every field set, each to a value of its own, so that a
// field decoded from another's number shows.
func filled[T any](t testing.TB) T {
	t.Helper()
	var v T
	rv := reflect.ValueOf(&v).Elem()
	for i := range rv.NumField() {
		f, name := rv.Field(i), rv.Type().Field(i).Name
		switch f.Kind() {
		case reflect.String:
			f.SetString(name + "-value")
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Map:
			f.Set(reflect.ValueOf(map[string]string{name + "-key": name + "-value", "empty": ""}))
		default:
			t.Fatalf("filled: %s is a %s", name, f.Kind())
		}
	}
	return v
}

// Each kind, encoded by machinery's own typed resource, reads back as the
// facts the typed spec holds; every field of the mirrored specs is set.
func TestDecodesMachinerysWireForm(t *testing.T) {
	platform := filled[facts.Platform](t)
	system := filled[facts.System](t)
	pm := runtime.NewPlatformMetadataSpec(runtime.NamespaceName, runtime.PlatformMetadataID)
	*pm.TypedSpec() = runtime.PlatformMetadataSpec(platform)
	si := hardware.NewSystemInformation(hardware.SystemInformationID)
	*si.TypedSpec() = hardware.SystemInformationSpec(system)
	nn := k8s.NewNodename(k8s.NamespaceName, k8s.NodenameID)
	nn.TypedSpec().Nodename, nn.TypedSpec().HostnameVersion, nn.TypedSpec().SkipNodeRegistration = "web-1", "7", true
	ips := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("fe80::1%eth0")}
	nodeIP := k8s.NewNodeIP(k8s.NamespaceName, k8s.KubeletID)
	nodeIP.TypedSpec().Addresses = ips
	ipConfig := k8s.NewNodeIPConfig(k8s.NamespaceName, k8s.KubeletID)
	ipConfig.TypedSpec().ValidSubnets = []string{"192.0.2.0/24"}
	ipConfig.TypedSpec().ExcludeSubnets = []string{"10.244.0.0/16", "203.0.113.100", "2001:db8::100"}

	s := newSnapshot()
	applyResponse(t, s, response(t, cosiv1alpha1.EventType_CREATED, pm, si, nn, nodeIP, ipConfig))
	got := s.facts()
	if !reflect.DeepEqual(got.Metadata, &platform) {
		t.Errorf("PlatformMetadata read as\n%+v\nwant\n%+v", got.Metadata, platform)
	}
	if !reflect.DeepEqual(got.System, &system) {
		t.Errorf("SystemInformation read as\n%+v\nwant\n%+v", got.System, system)
	}
	if got.Nodename != "web-1" {
		t.Errorf("Nodename read as %q", got.Nodename)
	}
	if !slices.Equal(got.NodeIPs, ips) {
		t.Errorf("NodeIP read as %v, want %v", got.NodeIPs, ips)
	}
	if want := []netip.Addr{netip.MustParseAddr("203.0.113.100"), netip.MustParseAddr("2001:db8::100")}; !slices.Equal(got.VIPs, want) {
		t.Errorf("NodeIPConfig's VIPs read as %v, want %v", got.VIPs, want)
	}

	// Gone, each is forgotten.
	applyResponse(t, s, response(t, cosiv1alpha1.EventType_DESTROYED, pm, si, nn, nodeIP, ipConfig))
	if got := s.facts(); !got.Equal(facts.Talos{}) {
		t.Errorf("after every resource was destroyed: %+v", got)
	}
}

// Bootstrapped counts a kind as read; an Errored event's error, or a
// stand-in for none, ends the session; Noop does nothing.
func TestWatchEvents(t *testing.T) {
	boom := "boom"
	msg, err := proto.Marshal(&cosiv1alpha1.WatchResponse{Event: []*cosiv1alpha1.Event{
		{EventType: cosiv1alpha1.EventType_BOOTSTRAPPED},
		{EventType: cosiv1alpha1.EventType_NOOP},
		{EventType: cosiv1alpha1.EventType_ERRORED, Error: &boom},
		{EventType: cosiv1alpha1.EventType_ERRORED},
	}})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := watchResponse(msg)
	if err != nil || len(evs) != 4 {
		t.Fatalf("%d events, %v", len(evs), err)
	}
	s, bootstrapped := newSnapshot(), 0
	for i, want := range []string{"", "", "boom", "watch failed"} {
		err := s.apply(evs[i], &bootstrapped)
		if (err == nil) != (want == "") || err != nil && err.Error() != want {
			t.Errorf("event %d: %v, want %q", i, err, want)
		}
	}
	if bootstrapped != 1 {
		t.Errorf("%d kinds bootstrapped, want 1", bootstrapped)
	}
	if _, err := watchResponse(msg[:len(msg)-1]); err == nil {
		t.Error("a truncated WatchResponse decoded")
	}
}

// Only the kubelet's NodeIP and NodeIPConfig are the node's.
func TestReadsOnlyTheKubeletsNodeIPs(t *testing.T) {
	nodeIP := k8s.NewNodeIP(k8s.NamespaceName, "etcd")
	nodeIP.TypedSpec().Addresses = []netip.Addr{netip.MustParseAddr("10.0.0.9")}
	ipConfig := k8s.NewNodeIPConfig(k8s.NamespaceName, "etcd")
	ipConfig.TypedSpec().ExcludeSubnets = []string{"203.0.113.100"}
	s := newSnapshot()
	applyResponse(t, s, response(t, cosiv1alpha1.EventType_CREATED, nodeIP, ipConfig))
	if got := s.facts(); got.NodeIPs != nil || got.VIPs != nil {
		t.Errorf("another NodeIP or NodeIPConfig than the kubelet's read: %+v", got)
	}
}

func TestAddressStatusWireForm(t *testing.T) {
	for _, tc := range []struct {
		link, cidr string
		want       bool
	}{{ExternalLink, "203.0.113.5/32", true}, {ExternalLink, "2001:db8::5/128", true}, {ExternalLink, "::ffff:203.0.113.6/128", true}, {"eth0", "10.0.0.1/24", false}} {
		r := network.NewAddressStatus(network.NamespaceName, tc.link+"/"+tc.cidr)
		r.TypedSpec().LinkName = tc.link
		r.TypedSpec().Address = netip.MustParsePrefix(tc.cidr)
		r.TypedSpec().Local = netip.MustParseAddr("192.0.2.1")
		r.TypedSpec().LinkIndex, r.TypedSpec().Priority = 3, 1024
		ip, ok, err := externalAddress(wire(t, r).GetSpec().GetProtoSpec())
		if err != nil || ok != tc.want || (ok && ip != netip.MustParsePrefix(tc.cidr).Addr().Unmap()) {
			t.Errorf("%s %s: %v %v %v", tc.link, tc.cidr, ip, ok, err)
		}
	}
}

// Malformed specs are errors that say where, never a panic or a fact.
func TestMalformedSpecs(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec []byte
		want string
	}{
		{"a truncated string", []byte{0x0a, 0x05, 'm', 'e'}, "field 1: unexpected EOF"},
		{"a bool where a string is", []byte{0x08, 0x01}, "field 1: wire type 0, want a string"},
		{"a string where a bool is", []byte{0x42, 0x01, 'x'}, "field 8: wire type 2, want a bool"},
		{"a truncated tag map entry", []byte{0x5a, 0x03, 0x0a, 0x05, 'k'}, "field 11: field 1: unexpected EOF"},
		// protowire's own words are not matched: protobuf varies their
		// spaces on purpose, so that nobody depends on them.
		{"field number 0", []byte{0x02, 0x00}, "field tag: "},
		{"an overlong varint", []byte{0x40, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, "field 8: "},
	} {
		_, err := decodePlatform(tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("PlatformMetadata with %s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	if _, err := decodeNodeIPs([]byte{0x0a, 0x02, 0x0a, 0x03}); err == nil {
		t.Error("a NodeIP address of a truncated NetIP decoded")
	}
	if _, err := decodeNodeIPs([]byte{0x0a, 0x07, 0x0a, 0x05, 1, 2, 3, 4, 5}); err == nil {
		t.Error("a NodeIP address of 5 bytes decoded")
	}
	if _, _, err := externalAddress(append([]byte{0x0a, 0x04, 0x0a, 0x02, 1, 2}, append([]byte{0x3a, 0x08}, ExternalLink...)...)); err == nil || !strings.Contains(err.Error(), "address of 2 bytes") {
		t.Errorf("an external address of 2 bytes: %v", err)
	}
	s := newSnapshot()
	bad := event{typ: eventUpdated, namespace: runtimeNamespace, resourceType: platformMetadataType, id: runtime.PlatformMetadataID, spec: []byte{0x0a, 0x05}}
	err := s.apply(bad, new(int))
	if err == nil || !strings.Contains(err.Error(), "decoding PlatformMetadatas.talos.dev platformmetadata: field 1: unexpected EOF") {
		t.Errorf("a malformed PlatformMetadata event: %v", err)
	}
	if s.f.Metadata != nil {
		t.Errorf("a malformed PlatformMetadata left facts: %+v", s.f.Metadata)
	}
}

// FuzzDecoders: whatever machined sends, a spec or a WatchResponse, the
// decoders return an error or a value, and never panic.
func FuzzDecoders(f *testing.F) {
	pm := runtime.NewPlatformMetadataSpec(runtime.NamespaceName, runtime.PlatformMetadataID)
	*pm.TypedSpec() = runtime.PlatformMetadataSpec(filled[facts.Platform](f))
	nodeIP := k8s.NewNodeIP(k8s.NamespaceName, k8s.KubeletID)
	nodeIP.TypedSpec().Addresses = []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fe80::1%eth0")}
	as := network.NewAddressStatus(network.NamespaceName, "external/203.0.113.5/32")
	as.TypedSpec().LinkName, as.TypedSpec().Address = ExternalLink, netip.MustParsePrefix("203.0.113.5/32")
	for _, r := range []resource.Resource{pm, nodeIP, as} {
		f.Add(wire(f, r).GetSpec().GetProtoSpec())
		f.Add(response(f, cosiv1alpha1.EventType_UPDATED, r))
	}
	f.Add([]byte{0x0a, 0x05, 'm'})
	f.Add([]byte{0x5a, 0x03, 0x0a, 0x05, 'k'})
	f.Fuzz(func(t *testing.T, spec []byte) {
		_, _ = decodePlatform(spec)
		_, _ = decodeSystem(spec)
		_, _ = decodeNodename(spec)
		_, _ = decodeNodeIPs(spec)
		_, _ = decodeExcludeSubnets(spec)
		if evs, err := watchResponse(spec); err == nil {
			s := newSnapshot()
			for _, e := range evs {
				_ = s.apply(e, new(int))
			}
		}
		if ip, ok, err := externalAddress(spec); ok && (err != nil || !ip.IsValid()) {
			t.Errorf("external address %v with error %v", ip, err)
		}
	})
}
