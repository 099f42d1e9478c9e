package kubeletsim_test

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
)

func parseCSR(b []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	return x509.ParseCertificateRequest(block.Bytes)
}
