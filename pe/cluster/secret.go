package cluster

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// Secret is a job's shared secret: every connection between the job's
// processes (and to charmrun) proves it, so a foreign client on the same
// network cannot join, read or inject. charmrun makes one per job and
// hands it to the processes in the environment (SecretEnv), never on a
// command line (ps shows those).
type Secret [32]byte

// SecretEnv is the environment variable that carries the job's secret,
// hex-encoded.
const SecretEnv = "CHARMGO_JOB_SECRET"

// NewSecret makes a random secret.
func NewSecret() (Secret, error) {
	var s Secret
	if _, err := rand.Read(s[:]); err != nil {
		return s, fmt.Errorf("job secret: %w", err)
	}
	return s, nil
}

// ParseSecret reads a secret written by String (64 hex digits).
func ParseSecret(v string) (Secret, error) {
	var s Secret
	b, err := hex.DecodeString(v)
	if err != nil || len(b) != len(s) {
		return s, fmt.Errorf("job secret: want %d hex digits", 2*len(s))
	}
	copy(s[:], b)
	return s, nil
}

// String is the secret in hex, for the environment of a child process.
func (s Secret) String() string { return hex.EncodeToString(s[:]) }

// mac is the HMAC-SHA256 of parts under the secret, each part
// length-prefixed so that no two lists of parts give the same input.
func (s Secret) mac(parts ...[]byte) []byte {
	h := hmac.New(sha256.New, s[:])
	for _, p := range parts {
		var n [4]byte
		n[0], n[1], n[2], n[3] = byte(len(p)>>24), byte(len(p)>>16), byte(len(p)>>8), byte(len(p))
		h.Write(n[:])
		h.Write(p)
	}
	return h.Sum(nil)
}

// derive is a key for one use, taken from the secret.
func (s Secret) derive(use string) []byte { return s.mac([]byte("charmgo derive"), []byte(use)) }

// TLS is mutual TLS whose only certificate is made from the secret: an
// Ed25519 key derived from it, self-signed, the same in every process of
// the job. A peer is accepted only if it shows a certificate with that
// public key and proves it holds the private key (the TLS handshake does):
// only a holder of the secret can. It protects the control plane
// (protoactor-go's gRPC).
func (s Secret) TLS() (*tls.Config, error) {
	key := ed25519.NewKeyFromSeed(s.derive("tls key")[:ed25519.SeedSize])
	pub := key.Public().(ed25519.PublicKey)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "charmgo job"},
		DNSNames:              []string{"charmgo-job"},
		NotBefore:             time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, pub, key)
	if err != nil {
		return nil, fmt.Errorf("job certificate: %w", err)
	}
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("charmgo: the peer showed no certificate (not of this job)")
		}
		c, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return fmt.Errorf("charmgo: the peer's certificate: %w", err)
		}
		if k, ok := c.PublicKey.(ed25519.PublicKey); !ok || !bytes.Equal(k, pub) {
			return errors.New("charmgo: the peer's certificate is not this job's (wrong or no secret)")
		}
		return nil
	}
	return &tls.Config{
		Certificates:          []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		ClientAuth:            tls.RequireAnyClientCert,
		InsecureSkipVerify:    true, // the job's own check below replaces the CA chain
		VerifyPeerCertificate: verify,
		MinVersion:            tls.VersionTLS13,
		ServerName:            "charmgo-job",
	}, nil
}
