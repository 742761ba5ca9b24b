package config

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	security "istio.io/api/security/v1beta1"
)

// validateAuthorizationPolicy refuses what istiod's validation refuses in a policy's rules (its
// ValidateAuthorizationPolicy and pkg/config/security): a from, to or condition that is null or empty, an
// empty value, a value that is no IP, port, service account or trust domain, a path template Envoy cannot
// read, and a `when` key istiod does not know. Such a rule would otherwise be read as something else than
// written: an empty source matches every peer.
func validateAuthorizationPolicy(s *security.AuthorizationPolicy) error {
	if err := validateTargetRefs(s.GetSelector(), s.GetTargetRef(), s.GetTargetRefs()); err != nil {
		return err
	}
	if s.Action == security.AuthorizationPolicy_CUSTOM && s.GetProvider() == nil {
		return fieldErr("spec.provider", "required for action CUSTOM")
	}
	for i, r := range s.Rules {
		f := fmt.Sprintf("spec.rules[%d]", i)
		if r == nil {
			return fieldErr(f, "null: a rule must not be null")
		}
		for j, from := range r.From {
			if err := validateRuleFrom(fmt.Sprintf("%s.from[%d]", f, j), from); err != nil {
				return err
			}
		}
		for j, to := range r.To {
			if err := validateRuleTo(fmt.Sprintf("%s.to[%d]", f, j), to); err != nil {
				return err
			}
		}
		for j, w := range r.When {
			if err := validateCondition(fmt.Sprintf("%s.when[%d]", f, j), w); err != nil {
				return err
			}
		}
	}
	return nil
}

// namedValues is one list field of a source or an operation.
type namedValues struct {
	name   string
	values []string
}

func validateRuleFrom(f string, from *security.Rule_From) error {
	if from == nil {
		return fieldErr(f, "null: a from must not be null")
	}
	src := from.Source
	if src == nil {
		return fieldErr(f+".source", "required")
	}
	f += ".source"
	lists := []namedValues{
		{"principals", src.Principals}, {"notPrincipals", src.NotPrincipals},
		{"requestPrincipals", src.RequestPrincipals}, {"notRequestPrincipals", src.NotRequestPrincipals},
		{"namespaces", src.Namespaces}, {"notNamespaces", src.NotNamespaces},
		{"ipBlocks", src.IpBlocks}, {"notIpBlocks", src.NotIpBlocks},
		{"remoteIpBlocks", src.RemoteIpBlocks}, {"notRemoteIpBlocks", src.NotRemoteIpBlocks},
		{"serviceAccounts", src.ServiceAccounts}, {"notServiceAccounts", src.NotServiceAccounts},
		{"trustDomains", src.TrustDomains}, {"notTrustDomains", src.NotTrustDomains},
	}
	if err := checkNotEmpty(f, "source", lists); err != nil {
		return err
	}
	if len(src.Principals)+len(src.NotPrincipals)+len(src.Namespaces)+len(src.NotNamespaces) > 0 {
		if len(src.ServiceAccounts) > 0 {
			return fieldErr(f+".serviceAccounts", "cannot be set with principals or namespaces")
		}
		if len(src.NotServiceAccounts) > 0 {
			return fieldErr(f+".notServiceAccounts", "cannot be set with principals or namespaces")
		}
	}
	for _, l := range lists {
		lf := f + "." + l.name
		var err error
		switch l.name {
		case "ipBlocks", "notIpBlocks", "remoteIpBlocks", "notRemoteIpBlocks":
			err = checkIPs(lf, l.values)
		case "serviceAccounts", "notServiceAccounts":
			err = checkServiceAccounts(lf, l.values)
		case "trustDomains", "notTrustDomains":
			err = checkTrustDomains(lf, l.values)
		default:
			err = checkEmptyValues(lf, l.values)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func validateRuleTo(f string, to *security.Rule_To) error {
	if to == nil {
		return fieldErr(f, "null: a to must not be null")
	}
	op := to.Operation
	if op == nil {
		return fieldErr(f+".operation", "required")
	}
	f += ".operation"
	lists := []namedValues{
		{"hosts", op.Hosts}, {"notHosts", op.NotHosts}, {"ports", op.Ports}, {"notPorts", op.NotPorts},
		{"methods", op.Methods}, {"notMethods", op.NotMethods}, {"paths", op.Paths}, {"notPaths", op.NotPaths},
	}
	if err := checkNotEmpty(f, "operation", lists); err != nil {
		return err
	}
	for _, l := range lists {
		lf := f + "." + l.name
		var err error
		switch l.name {
		case "ports", "notPorts":
			err = checkPorts(lf, l.values)
		case "paths", "notPaths":
			err = checkPathTemplates(lf, l.values)
		default:
			err = checkEmptyValues(lf, l.values)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkNotEmpty refuses a source or operation that sets nothing, as istiod does: written `source: {}`, it
// reads as "any source" to some and as "no source" to others.
func checkNotEmpty(f, what string, lists []namedValues) error {
	for _, l := range lists {
		if len(l.values) > 0 {
			return nil
		}
	}
	names := make([]string, len(lists))
	for i, l := range lists {
		names[i] = l.name
	}
	return fieldErr(f, "empty: a %s must set at least one of %s", what, strings.Join(names, ", "))
}

func checkEmptyValues(f string, values []string) error {
	for i, v := range values {
		if v == "" {
			return fieldErr(fmt.Sprintf("%s[%d]", f, i), "empty value")
		}
	}
	return nil
}

// checkIPs takes an address, or a CIDR when the value has a "/", as istiod's ValidateIPs.
func checkIPs(f string, values []string) error {
	for i, v := range values {
		if v == "" {
			return fieldErr(fmt.Sprintf("%s[%d]", f, i), "empty value")
		}
		if strings.Contains(v, "/") {
			if _, err := netip.ParsePrefix(v); err != nil {
				return fieldErr(fmt.Sprintf("%s[%d]", f, i), "%q is not an IP address or CIDR: %v", v, err)
			}
		} else if _, err := netip.ParseAddr(v); err != nil {
			return fieldErr(fmt.Sprintf("%s[%d]", f, i), "%q is not an IP address or CIDR", v)
		}
	}
	return nil
}

// checkPorts takes port numbers 1-65535: istiod takes 0 too, which no connection has.
func checkPorts(f string, values []string) error {
	for i, v := range values {
		if n, err := strconv.ParseUint(v, 10, 16); err != nil || n == 0 {
			return fieldErr(fmt.Sprintf("%s[%d]", f, i), "%q is not a port number", v)
		}
	}
	return nil
}

// checkServiceAccounts applies istiod's CheckServiceAccount: at most 16 values, each SA or NS/SA, with no
// wildcard, at most 320 characters.
func checkServiceAccounts(f string, values []string) error {
	if len(values) > 16 {
		return fieldErr(f, "%d values: at most 16 are allowed", len(values))
	}
	for i, v := range values {
		vf := fmt.Sprintf("%s[%d]", f, i)
		ns, sa, hasNS := strings.Cut(v, "/")
		switch {
		case v == "":
			return fieldErr(vf, "empty value")
		case strings.Contains(v, "*"):
			return fieldErr(vf, "%q: a wildcard is not allowed", v)
		case len(v) > 320:
			return fieldErr(vf, "longer than 320 characters")
		case strings.Count(v, "/") > 1, hasNS && (ns == "" || sa == ""):
			return fieldErr(vf, "%q is not SERVICE_ACCOUNT or NAMESPACE/SERVICE_ACCOUNT", v)
		}
	}
	return nil
}

// checkWildcards applies istiod's CheckWildcardValues: one "*" at most, at the start or the end.
func checkWildcards(f string, values []string) error {
	for i, v := range values {
		vf := fmt.Sprintf("%s[%d]", f, i)
		n := strings.Count(v, "*")
		switch {
		case v == "":
			return fieldErr(vf, "empty value")
		case n > 1:
			return fieldErr(vf, "%q: at most one wildcard is allowed", v)
		case n == 1 && v != "*" && !strings.HasPrefix(v, "*") && !strings.HasSuffix(v, "*"):
			return fieldErr(vf, "%q: a wildcard is only allowed at the start or the end", v)
		}
	}
	return nil
}

func checkTrustDomains(f string, values []string) error {
	if err := checkWildcards(f, values); err != nil {
		return err
	}
	for i, v := range values {
		if strings.Contains(v, "/") {
			return fieldErr(fmt.Sprintf("%s[%d]", f, i), "%q: a trust domain must not contain /", v)
		}
	}
	return nil
}
