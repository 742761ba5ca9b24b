package model

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	networking "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pkg/cowmap"
)

// The entries a Secret is read from, as istiod reads them (pilot/pkg/credentials/kube): a generic Secret
// has cert, key, cacert and crl; a kubernetes.io/tls one tls.crt, tls.key, ca.crt, ca.crl and tls.ocsp-staple.
const (
	secretCert      = "cert"
	secretKey       = "key"
	secretCACert    = "cacert"
	secretCRL       = "crl"
	secretTLSCert   = "tls.crt"
	secretTLSKey    = "tls.key"
	secretTLSCA     = "ca.crt"
	secretTLSCRL    = "ca.crl"
	secretTLSStaple = "tls.ocsp-staple"
)

// CACertSuffix names the CA part of a credential: credentialName NAME validates peers with NAME-cacert,
// read from the Secret NAME-cacert if there is one, else from NAME's own CA entry.
const CACertSuffix = "-cacert"

// KeyPair is a certificate chain and its private key, with what Envoy may staple and check against.
type KeyPair struct {
	Cert, Key, Staple, CRL []byte
}

// CABundle is the certificates peers are validated against, and their revocation list.
type CABundle struct {
	CA, CRL []byte
}

// Credential is one Secret as a source of certificates. It is parsed the first time a generator asks,
// so the many Secrets of a cluster that no credentialName names cost no more than a pointer.
type Credential struct {
	Namespace, Name string
	ResourceVersion string
	Source          string

	secret *corev1.Secret
	// previous is the credential this one replaced; consulted once, for its material if this version is
	// malformed (keep last good), then dropped.
	previous *Credential

	once   sync.Once
	parsed *parsedCredential
}

type parsedCredential struct {
	keyPair                *KeyPair
	keyPairErr, keyPairOld error // keyPairOld: a problem of this version while the previous key pair is served
	ca                     *CABundle
	caErr, caOld           error
}

func newCredential(c *config.Config, previous *Credential) *Credential {
	s, _ := c.Spec.(*corev1.Secret)
	if s == nil {
		s = &corev1.Secret{}
	}
	return &Credential{Namespace: c.Namespace, Name: c.Name, ResourceVersion: c.ResourceVersion, Source: c.Source,
		secret: s, previous: previous}
}

func (c *Credential) parse() *parsedCredential {
	c.once.Do(func() {
		p := &parsedCredential{}
		p.keyPair, p.keyPairErr = readKeyPair(c.secret.Data)
		p.ca, p.caErr = readCABundle(c.secret.Data)
		if prev := c.previous; prev != nil {
			// A Secret edited into something unusable keeps serving what it held before, and says why.
			pp := prev.parse()
			if p.keyPairErr != nil && pp.keyPair != nil {
				p.keyPair, p.keyPairOld, p.keyPairErr = pp.keyPair, p.keyPairErr, nil
			}
			if p.caErr != nil && pp.ca != nil {
				p.ca, p.caOld, p.caErr = pp.ca, p.caErr, nil
			}
			c.previous = nil
		}
		c.parsed = p
	})
	return c.parsed
}

// KeyPair returns the certificate and key to serve, or why there is none. problem is set when the
// current version is malformed and the key pair is the previous version's, still served.
func (c *Credential) KeyPair() (kp *KeyPair, problem error) {
	p := c.parse()
	if p.keyPairErr != nil {
		return nil, p.keyPairErr
	}
	return p.keyPair, p.keyPairOld
}

// CABundle returns the CA certificates to serve, or why there are none; problem as for KeyPair.
func (c *Credential) CABundle() (ca *CABundle, problem error) {
	p := c.parse()
	if p.caErr != nil {
		return nil, p.caErr
	}
	return p.ca, p.caOld
}

func hasValues(d map[string][]byte, keys ...string) bool {
	for _, k := range keys {
		if len(d[k]) == 0 {
			return false
		}
	}
	return true
}

func hasKeys(d map[string][]byte, keys ...string) bool {
	for _, k := range keys {
		if _, ok := d[k]; !ok {
			return false
		}
	}
	return true
}

// readKeyPair reads cert/key (generic) or tls.crt/tls.key, in istiod's order, and checks that they form
// a key pair: Envoy refuses a Secret whose key does not match its certificate. Errors never quote data.
func readKeyPair(d map[string][]byte) (*KeyPair, error) {
	var kp *KeyPair
	switch {
	case hasValues(d, secretCert, secretKey):
		kp = &KeyPair{Cert: d[secretCert], Key: d[secretKey], CRL: d[secretCRL]}
	case hasValues(d, secretTLSCert, secretTLSKey):
		kp = &KeyPair{Cert: d[secretTLSCert], Key: d[secretTLSKey], Staple: d[secretTLSStaple], CRL: d[secretTLSCRL]}
	case hasKeys(d, secretCert, secretKey):
		return nil, fmt.Errorf("entries %q and %q are empty", secretCert, secretKey)
	case hasKeys(d, secretTLSCert, secretTLSKey):
		return nil, fmt.Errorf("entries %q and %q are empty", secretTLSCert, secretTLSKey)
	default:
		return nil, fmt.Errorf("no certificate: want entries %q and %q (kubernetes.io/tls) or %q and %q; has %s",
			secretTLSCert, secretTLSKey, secretCert, secretKey, entryNames(d))
	}
	if _, err := tls.X509KeyPair(kp.Cert, kp.Key); err != nil {
		return nil, fmt.Errorf("certificate and key unusable: %s", strings.TrimPrefix(err.Error(), "tls: "))
	}
	return kp, nil
}

// readCABundle reads cacert (generic) or ca.crt, in istiod's order; it must hold PEM certificates.
func readCABundle(d map[string][]byte) (*CABundle, error) {
	var ca *CABundle
	var entry string
	switch {
	case hasValues(d, secretCACert):
		ca, entry = &CABundle{CA: d[secretCACert], CRL: d[secretCRL]}, secretCACert
	case hasValues(d, secretTLSCA):
		ca, entry = &CABundle{CA: d[secretTLSCA], CRL: d[secretTLSCRL]}, secretTLSCA
	case hasKeys(d, secretCACert):
		return nil, fmt.Errorf("entry %q is empty", secretCACert)
	case hasKeys(d, secretTLSCA):
		return nil, fmt.Errorf("entry %q is empty", secretTLSCA)
	default:
		return nil, fmt.Errorf("no CA certificate: want entry %q or %q; has %s", secretTLSCA, secretCACert, entryNames(d))
	}
	if err := checkCertificates(ca.CA); err != nil {
		return nil, fmt.Errorf("entry %q: %w", entry, err)
	}
	return ca, nil
}

func checkCertificates(data []byte) error {
	n := 0
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return fmt.Errorf("certificate %d: %v", n+1, err)
		}
		n++
	}
	if n == 0 {
		return errors.New("no PEM certificate")
	}
	return nil
}

func entryNames(d map[string][]byte) string {
	if len(d) == 0 {
		return "no entries"
	}
	names := make([]string, 0, len(d))
	for k := range d {
		names = append(names, fmt.Sprintf("%q", k))
	}
	slices.Sort(names)
	if len(names) > 5 {
		names = append(names[:5], fmt.Sprintf("and %d more", len(names)-5))
	}
	return strings.Join(names, ", ")
}

// CertificateExpiry says when the leaf certificate of kp is outside its validity at now, "" when it is
// not; such a certificate is served anyway, as istiod does.
func CertificateExpiry(kp *KeyPair, now time.Time) string {
	block, _ := pem.Decode(kp.Cert)
	if block == nil {
		return ""
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return ""
	}
	switch {
	case now.After(cert.NotAfter):
		return "certificate expired at " + cert.NotAfter.UTC().Format(time.RFC3339)
	case now.Before(cert.NotBefore):
		return "certificate not valid before " + cert.NotBefore.UTC().Format(time.RFC3339)
	}
	return ""
}

func secretKeyOf(namespace, name string) string { return namespace + "/" + name }

func buildCredentials(reader ConfigReader) *cowmap.Map[*Credential] {
	b := cowmap.New[*Credential]().Edit()
	for _, c := range reader.ListUnsorted(config.Secret) {
		b.Set(secretKeyOf(c.Namespace, c.Name), newCredential(c, nil))
	}
	return b.Map()
}

// secretChanged updates the credential of one Secret and records it for the SDS push.
func (u *updater) secretChanged(ch Change) {
	key := secretKeyOf(ch.Key.Namespace, ch.Key.Name)
	if u.credentials == nil {
		u.credentials = u.prev.credentials.Edit()
	}
	if c := u.reader.Get(ch.Key); c != nil {
		prev, _ := u.credentials.Get(key)
		u.credentials.Set(key, newCredential(c, prev))
	} else {
		u.credentials.Delete(key)
	}
	if u.res.SecretsUpdated == nil {
		u.res.SecretsUpdated = map[string]struct{}{}
	}
	u.res.SecretsUpdated[key] = struct{}{}
	u.addRebuilt(IndexCredentials)
}

// Credential returns the Secret namespace/name as a credential, nil if there is none.
func (ps *PushContext) Credential(namespace, name string) *Credential {
	if ps.credentials == nil {
		return nil
	}
	c, _ := ps.credentials.Get(secretKeyOf(namespace, name))
	return c
}

// CredentialsID identifies the credentials index, for caches.
func (ps *PushContext) CredentialsID() any { return ps.credentials }

// CredentialProblems reports every credentialName of a Gateway server or a DestinationRule whose Secret
// is missing or unusable, as warnings naming the object, the field and the Secret. The Secret is looked
// for in the object's namespace; a proxy reads it from its own, so a gateway proxy in another namespace
// than its Gateway is told so in the message.
func (ps *PushContext) CredentialProblems(now time.Time) []*config.Error {
	var out []*config.Error
	report := func(c *config.Config, field, credential string, mutual bool) {
		for _, msg := range ps.credentialProblem(c.Namespace, credential, mutual, now) {
			out = append(out, &config.Error{File: c.Source, Kind: string(c.Kind), Namespace: c.Namespace, Name: c.Name,
				Field: field, Message: msg, Warning: true})
		}
	}
	if ps.gateways != nil {
		for _, c := range ps.gateways.all {
			for i, s := range c.Spec.(*networking.Gateway).GetServers() {
				tls := s.GetTls()
				if tls.GetCredentialName() == "" || tls.GetMode() == networking.ServerTLSSettings_ISTIO_MUTUAL {
					continue
				}
				mutual := tls.GetMode() == networking.ServerTLSSettings_MUTUAL || tls.GetMode() == networking.ServerTLSSettings_OPTIONAL_MUTUAL
				report(c, fmt.Sprintf("spec.servers[%d].tls.credentialName", i), tls.CredentialName, mutual)
			}
		}
	}
	if ps.destinationRules != nil {
		for _, rules := range ps.destinationRules.byNamespace {
			for _, dr := range rules {
				src := dr.Sources[0]
				check := func(field string, tls *networking.ClientTLSSettings) {
					if tls.GetCredentialName() == "" {
						return
					}
					cfg := &config.Config{Key: src}
					switch tls.GetMode() {
					case networking.ClientTLSSettings_MUTUAL:
						report(cfg, field+".credentialName", tls.CredentialName, !tls.GetInsecureSkipVerify().GetValue())
					case networking.ClientTLSSettings_SIMPLE:
						if !tls.GetInsecureSkipVerify().GetValue() {
							report(cfg, field+".credentialName", tls.CredentialName+CACertSuffix, false)
						}
					}
				}
				tp := dr.Spec.GetTrafficPolicy()
				check("spec.trafficPolicy.tls", tp.GetTls())
				for i, pl := range tp.GetPortLevelSettings() {
					check(fmt.Sprintf("spec.trafficPolicy.portLevelSettings[%d].tls", i), pl.GetTls())
				}
				for i, ss := range dr.Spec.GetSubsets() {
					check(fmt.Sprintf("spec.subsets[%d].trafficPolicy.tls", i), ss.GetTrafficPolicy().GetTls())
					for j, pl := range ss.GetTrafficPolicy().GetPortLevelSettings() {
						check(fmt.Sprintf("spec.subsets[%d].trafficPolicy.portLevelSettings[%d].tls", i, j), pl.GetTls())
					}
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b *config.Error) int {
		if c := config.CompareKeys(config.Key{Kind: config.Kind(a.Kind), Namespace: a.Namespace, Name: a.Name},
			config.Key{Kind: config.Kind(b.Kind), Namespace: b.Namespace, Name: b.Name}); c != 0 {
			return c
		}
		if c := strings.Compare(a.Field, b.Field); c != 0 {
			return c
		}
		return strings.Compare(a.Message, b.Message)
	})
	return out
}

// credentialProblem checks credential (NAME, or NAME-cacert for a CA alone) in namespace: the key pair,
// and with mutual the CA too, as SDS will serve them.
func (ps *PushContext) credentialProblem(namespace, credential string, mutual bool, now time.Time) []string {
	credential = strings.TrimPrefix(credential, "kubernetes://")
	if strings.Contains(credential, "://") {
		return nil // another provider's credential (builtin://, sds://...): not served from Secrets
	}
	if ns, name, ok := strings.Cut(credential, "/"); ok {
		namespace, credential = ns, name
	}
	where := fmt.Sprintf("Secret %s/%s", namespace, credential)
	if name, caOnly := strings.CutSuffix(credential, CACertSuffix); caOnly {
		if _, found, problem := ps.caBundle(namespace, name); problem != nil {
			return []string{fmt.Sprintf("%s: %v", where, problem)}
		} else if !found {
			return []string{fmt.Sprintf("Secret %s/%s (or %s/%s for its CA) not found: the proxy never gets the CA and "+
				"its TLS connections fail; a proxy reads it from its own namespace", namespace, credential, namespace, name)}
		}
		return nil
	}
	c := ps.Credential(namespace, credential)
	if c == nil {
		return []string{where + " not found: the listener or cluster naming it waits for its certificate and its TLS " +
			"connections fail; a proxy reads it from its own namespace"}
	}
	var out []string
	kp, problem := c.KeyPair()
	switch {
	case kp == nil:
		out = append(out, fmt.Sprintf("%s: %v: not served", where, problem))
	case problem != nil:
		out = append(out, fmt.Sprintf("%s: %v: serving its previous version", where, problem))
	default:
		if p := CertificateExpiry(kp, now); p != "" {
			out = append(out, where+": "+p)
		}
	}
	if mutual {
		if _, _, problem := ps.caBundle(namespace, credential); problem != nil {
			out = append(out, fmt.Sprintf("Secret %s/%s%s: %v", namespace, credential, CACertSuffix, problem))
		}
	}
	return out
}

// CABundle returns the CA of credential NAME in namespace as SDS serves NAME-cacert: from the Secret
// NAME-cacert if it exists, else from NAME's own CA entry (istiod's rule). found is false when neither
// Secret exists; problem says why a found one has no usable CA (or that a previous version is served).
func (ps *PushContext) CABundle(namespace, name string) (ca *CABundle, found bool, problem error) {
	return ps.caBundle(namespace, name)
}

func (ps *PushContext) caBundle(namespace, name string) (*CABundle, bool, error) {
	c := ps.Credential(namespace, name+CACertSuffix)
	if c == nil {
		c = ps.Credential(namespace, name)
	}
	if c == nil {
		return nil, false, nil
	}
	ca, problem := c.CABundle()
	return ca, true, problem
}
