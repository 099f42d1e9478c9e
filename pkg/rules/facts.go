package rules

import (
	"strconv"
	"strings"

	"github.com/talos-nodeinit/talos-nodeinit/pkg/facts"
)

// Facts are what rules are evaluated against.
type Facts struct {
	Metadata facts.Platform
	System   facts.System
}

// templateData is what templates see: platform metadata and system
// information fields under Talos's Go names (.Platform, .Manufacturer, …).
type templateData struct {
	Platform, Hostname, Region, Zone, InstanceType, InstanceID, ProviderID string
	Spot                                                                   bool
	InternalDNS, ExternalDNS                                               string
	Tags                                                                   map[string]string

	Manufacturer, ProductName, Version, SerialNumber, UUID, WakeUpType, SKUNumber string
}

func newTemplateData(f Facts) templateData {
	m, s := f.Metadata, f.System
	tags := m.Tags
	if tags == nil {
		tags = map[string]string{}
	}
	return templateData{
		Platform: m.Platform, Hostname: m.Hostname, Region: m.Region, Zone: m.Zone,
		InstanceType: m.InstanceType, InstanceID: m.InstanceID, ProviderID: m.ProviderID,
		Spot: m.Spot, InternalDNS: m.InternalDNS, ExternalDNS: m.ExternalDNS, Tags: tags,
		Manufacturer: s.Manufacturer, ProductName: s.ProductName, Version: s.Version,
		SerialNumber: s.SerialNumber, UUID: s.UUID, WakeUpType: s.WakeUpType, SKUNumber: s.SKUNumber,
	}
}

// field is one selector key or override target, by its lower-case name.
type field struct {
	get func(Facts) (string, bool)
	// set is nil for fields rules may not override.
	set func(*facts.Platform, string)
}

func str(get func(Facts) string) func(Facts) (string, bool) {
	return func(f Facts) (string, bool) { v := get(f); return v, v != "" }
}

// fields maps lower-case keys to facts. Selector keys are case-insensitive,
// like Talos CCM's (which lower-cases the YAML tag names). Empty strings
// count as absent; spot is always present, as "true" or "false".
var fields = map[string]field{
	"platform": {get: str(func(f Facts) string { return f.Metadata.Platform })},
	"hostname": {get: str(func(f Facts) string { return f.Metadata.Hostname })},
	"region": {get: str(func(f Facts) string { return f.Metadata.Region }),
		set: func(m *facts.Platform, v string) { m.Region = v }},
	"zone": {get: str(func(f Facts) string { return f.Metadata.Zone }),
		set: func(m *facts.Platform, v string) { m.Zone = v }},
	"instancetype": {get: str(func(f Facts) string { return f.Metadata.InstanceType }),
		set: func(m *facts.Platform, v string) { m.InstanceType = v }},
	"instanceid": {get: str(func(f Facts) string { return f.Metadata.InstanceID }),
		set: func(m *facts.Platform, v string) { m.InstanceID = v }},
	"providerid": {get: str(func(f Facts) string { return f.Metadata.ProviderID }),
		set: func(m *facts.Platform, v string) { m.ProviderID = v }},
	"spot": {get: func(f Facts) (string, bool) { return strconv.FormatBool(f.Metadata.Spot), true },
		set: func(m *facts.Platform, v string) { m.Spot = strings.EqualFold(v, "true") }},
	"internaldns": {get: str(func(f Facts) string { return f.Metadata.InternalDNS }),
		set: func(m *facts.Platform, v string) { m.InternalDNS = v }},
	"externaldns": {get: str(func(f Facts) string { return f.Metadata.ExternalDNS }),
		set: func(m *facts.Platform, v string) { m.ExternalDNS = v }},

	"manufacturer": {get: str(func(f Facts) string { return f.System.Manufacturer })},
	"productname":  {get: str(func(f Facts) string { return f.System.ProductName })},
	"version":      {get: str(func(f Facts) string { return f.System.Version })},
	"serialnumber": {get: str(func(f Facts) string { return f.System.SerialNumber })},
	"uuid":         {get: str(func(f Facts) string { return f.System.UUID })},
	"wakeuptype":   {get: str(func(f Facts) string { return f.System.WakeUpType })},
	"skunumber":    {get: str(func(f Facts) string { return f.System.SKUNumber })},
}

func fieldNames(settable bool) string {
	var names []string
	for _, n := range []string{"platform", "hostname", "region", "zone", "instancetype", "instanceid", "providerid", "spot", "internaldns", "externaldns",
		"manufacturer", "productname", "version", "serialnumber", "uuid", "wakeuptype", "skunumber"} {
		if !settable || fields[n].set != nil {
			names = append(names, n)
		}
	}
	return strings.Join(names, ", ")
}
