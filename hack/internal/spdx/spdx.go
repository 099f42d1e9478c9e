// Package spdx writes the software bill of materials a Talos system
// extension carries: an SPDX 2.3 JSON document listing a Go binary's main
// module, every module linked into it, and the Go standard library, each
// with its version and a purl. Talos reads such documents from
// /usr/local/share/spdx/*.spdx.json in every extension and lists their
// packages as SBOMItem resources (`talosctl get sbom`), the way the official
// extensions' SBOMs are listed.
//
// The document is a pure function of the binary's embedded build
// information, so the same binary gives the same bytes.
package spdx

import (
	"encoding/json"
	"fmt"
	"regexp"
	"runtime/debug"
	"strings"
	"time"
)

// Document is the part of SPDX 2.3 this package writes.
type Document struct {
	SPDXVersion       string         `json:"spdxVersion"`
	DataLicense       string         `json:"dataLicense"`
	SPDXID            string         `json:"SPDXID"`
	Name              string         `json:"name"`
	DocumentNamespace string         `json:"documentNamespace"`
	CreationInfo      CreationInfo   `json:"creationInfo"`
	Packages          []Package      `json:"packages"`
	Relationships     []Relationship `json:"relationships"`
}

// CreationInfo says when and by what the document was made.
type CreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

// Package is one module. Talos reads name, versionInfo, licenseDeclared
// and the purl and cpe23Type external references.
type Package struct {
	Name             string        `json:"name"`
	SPDXID           string        `json:"SPDXID"`
	VersionInfo      string        `json:"versionInfo"`
	DownloadLocation string        `json:"downloadLocation"`
	FilesAnalyzed    bool          `json:"filesAnalyzed"`
	LicenseConcluded string        `json:"licenseConcluded"`
	LicenseDeclared  string        `json:"licenseDeclared"`
	CopyrightText    string        `json:"copyrightText"`
	ExternalRefs     []ExternalRef `json:"externalRefs"`
}

// ExternalRef is a package URL.
type ExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

// Relationship links two SPDX elements.
type Relationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// Binary describes the binary a document is for.
type Binary struct {
	Name    string // the package name Talos lists, e.g. nodeinit-agent
	Version string // the release, e.g. v0.1.0
	License string // the SPDX license of the main module, e.g. Apache-2.0
	// Namespace prefixes the document's unique URI.
	Namespace string
}

var invalidID = regexp.MustCompile(`[^a-zA-Z0-9.-]+`)

func id(name string) string {
	return "SPDXRef-Package-" + strings.Trim(invalidID.ReplaceAllString(name, "-"), "-")
}

// For returns the document for a binary built with bi. The creation time
// is the commit time Go stamped into the binary (vcs.time), or the Unix
// epoch when it has none, so that the document is reproducible.
func For(b Binary, bi *debug.BuildInfo) (*Document, error) {
	if b.Name == "" || b.Version == "" {
		return nil, fmt.Errorf("spdx: a binary needs a name and a version")
	}
	created := time.Unix(0, 0).UTC()
	for _, s := range bi.Settings {
		if s.Key == "vcs.time" {
			if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
				created = t.UTC()
			}
		}
	}
	main := Package{
		Name: b.Name, SPDXID: id(b.Name), VersionInfo: b.Version, DownloadLocation: "NOASSERTION",
		LicenseConcluded: "NOASSERTION", LicenseDeclared: orNoAssertion(b.License), CopyrightText: "NOASSERTION",
		ExternalRefs: []ExternalRef{purl(bi.Main.Path, b.Version)},
	}
	doc := &Document{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT", Name: b.Name,
		DocumentNamespace: fmt.Sprintf("%s/%s-%s", strings.TrimSuffix(b.Namespace, "/"), b.Name, b.Version),
		CreationInfo:      CreationInfo{Created: created.Format(time.RFC3339), Creators: []string{"Tool: talos-nodeinit-hack-extension"}},
		Packages:          []Package{main},
		Relationships:     []Relationship{{Element: "SPDXRef-DOCUMENT", Type: "DESCRIBES", Related: main.SPDXID}},
	}
	add := func(name, version string, ref ExternalRef) {
		p := Package{
			Name: name, SPDXID: id(name), VersionInfo: version, DownloadLocation: "NOASSERTION",
			LicenseConcluded: "NOASSERTION", LicenseDeclared: "NOASSERTION", CopyrightText: "NOASSERTION",
			ExternalRefs: []ExternalRef{ref},
		}
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, Relationship{Element: main.SPDXID, Type: "DEPENDS_ON", Related: p.SPDXID})
	}
	goVersion := strings.TrimPrefix(bi.GoVersion, "go")
	add("go", goVersion, purl("stdlib", "go"+goVersion))
	for _, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		add(m.Path, m.Version, purl(m.Path, m.Version))
	}
	return doc, nil
}

// JSON is the document as Talos reads it.
func (d *Document) JSON() ([]byte, error) { return json.MarshalIndent(d, "", "  ") }

func purl(path, version string) ExternalRef {
	return ExternalRef{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: "pkg:golang/" + path + "@" + version}
}

func orNoAssertion(s string) string {
	if s == "" {
		return "NOASSERTION"
	}
	return s
}

// TalosItem is what Talos's SBOMItemController keeps of one package: the
// fields of an SBOMItem resource (`talosctl get sbom`).
type TalosItem struct {
	Name, Version, License string
	PURLs, CPEs            []string
}

// AsTalosReads decodes an SPDX JSON document the way Talos's
// SBOMItemController does (internal/app/machined/pkg/controllers/runtime,
// sbom_item.go): only name, versionInfo, licenseDeclared (NOASSERTION is
// no license) and the purl and cpe23Type external references.
func AsTalosReads(data []byte) ([]TalosItem, error) {
	var doc struct {
		Packages []struct {
			Name         string `json:"name"`
			Version      string `json:"versionInfo"`
			License      string `json:"licenseDeclared"`
			ExternalRefs []struct {
				Type    string `json:"referenceType"`
				Locator string `json:"referenceLocator"`
			} `json:"externalRefs"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	items := make([]TalosItem, 0, len(doc.Packages))
	for _, p := range doc.Packages {
		it := TalosItem{Name: p.Name, Version: p.Version}
		if p.License != "NOASSERTION" {
			it.License = p.License
		}
		for _, r := range p.ExternalRefs {
			switch r.Type {
			case "purl":
				it.PURLs = append(it.PURLs, r.Locator)
			case "cpe23Type":
				it.CPEs = append(it.CPEs, r.Locator)
			}
		}
		items = append(items, it)
	}
	return items, nil
}
