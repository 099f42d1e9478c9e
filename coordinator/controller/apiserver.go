package controller

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// APIServerSANs dials the API server and returns the DNS names and IPs its serving certificate is
// valid for (Talos puts the endpoint, a shared VIP and control-plane addresses in it): a node
// certificate naming any would impersonate the API server to every client trusting the cluster CA.
func APIServerSANs(ctx context.Context, cfg *rest.Config) ([]string, []netip.Addr, error) {
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	if tlsCfg == nil {
		return nil, nil, fmt.Errorf("the API server %s is not reached over TLS", cfg.Host)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil || u.Host == "" {
		u = &url.URL{Host: cfg.Host}
	}
	host := u.Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(strings.Trim(host, "[]"), "443")
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: tlsCfg}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the API server's certificate: %w", err)
	}
	defer conn.Close()
	certs := conn.(*tls.Conn).ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil, nil, fmt.Errorf("the API server %s presented no certificate", host)
	}
	var ips []netip.Addr
	for _, raw := range certs[0].IPAddresses {
		if ip, ok := netip.AddrFromSlice(raw); ok {
			ips = append(ips, ip.Unmap())
		}
	}
	names := make([]string, 0, len(certs[0].DNSNames))
	for _, n := range certs[0].DNSNames {
		names = append(names, strings.ToLower(n))
	}
	return names, ips, nil
}
