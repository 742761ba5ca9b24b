package autoregister

import (
	"fmt"
	"maps"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
)

// The annotations istiod writes on the entries it registers (istio.io/api/annotation), read back by every
// replica: which group made the entry, which replica holds the agent's connection, and since when.
const (
	AnnotationGroup          = "istio.io/autoRegistrationGroup"
	AnnotationController     = "istio.io/workloadController"
	AnnotationConnectedAt    = "istio.io/connectedAt"
	AnnotationDisconnectedAt = "istio.io/disconnectedAt"
	// AnnotationHealthChecks marks an entry whose agent reports its health over xDS.
	AnnotationHealthChecks = "proxy.istio.io/health-checks-enabled"
)

// timeFormat is istiod's for the connection annotations.
const timeFormat = time.RFC3339Nano

// localityLabel is the label istiod derives from the locality; a '/' is not allowed in a label value.
const localityLabel = "istio-locality"

// maxNameLength is the longest Kubernetes object name.
const maxNameLength = 253

// entryName is istiod's name of the entry of proxy p: GROUP-IP[-NETWORK], an IPv6 address's colons as dashes,
// cut from the front to the longest name Kubernetes accepts.
func entryName(p *model.Proxy) (string, error) {
	if len(p.IPAddresses) == 0 {
		return "", fmt.Errorf("auto-registration of %s: the node has no IP address", p)
	}
	parts := []string{p.AutoRegisterGroup, strings.ReplaceAll(p.IPAddresses[0], ":", "-")}
	if p.Network != "" {
		parts = append(parts, p.Network)
	}
	name := strings.Join(parts, "-")
	if len(name) > maxNameLength {
		name = name[len(name)-maxNameLength:]
	}
	return name, nil
}

// entryFromGroup is the WorkloadEntry istiod makes of group for proxy p: the group's template, with the
// proxy's first address, labels from the template, the group's metadata and the node (later wins), the
// node's network and locality, and the group's name (and metadata annotations) as annotations.
func entryFromGroup(name string, p *model.Proxy, group *config.Config) *config.Config {
	g := group.Spec.(*networking.WorkloadGroup)
	spec := proto.Clone(g.GetTemplate()).(*networking.WorkloadEntry)
	spec.Address = p.IPAddresses[0]
	labels := map[string]string{}
	maps.Copy(labels, spec.GetLabels())
	maps.Copy(labels, g.GetMetadata().GetLabels())
	if p.Labels != nil {
		maps.Copy(labels, p.Labels)
		// The locality is the entry's own field; as a label it would hold '/', which Kubernetes refuses.
		delete(labels, localityLabel)
	}
	spec.Labels = labels
	annotations := map[string]string{AnnotationGroup: group.Name}
	maps.Copy(annotations, g.GetMetadata().GetAnnotations())
	if p.Network != "" {
		spec.Network = p.Network
	}
	if l := p.Node.GetLocality(); l != nil {
		spec.Locality = localityString(l.GetRegion(), l.GetZone(), l.GetSubZone())
	}
	if p.ProxyConfig.GetReadinessProbe() != nil {
		annotations[AnnotationHealthChecks] = "true"
	}
	return &config.Config{
		Key:         config.Key{Kind: config.WorkloadEntry, Namespace: p.Namespace, Name: name},
		Labels:      labels,
		Annotations: annotations,
		Source:      SourceName,
		Spec:        spec,
	}
}

// localityString is istiod's REGION/ZONE/SUBZONE, stopping at the first empty part after the region.
func localityString(region, zone, subzone string) string {
	switch {
	case zone == "":
		return region
	case subzone == "":
		return region + "/" + zone
	}
	return region + "/" + zone + "/" + subzone
}

// withConnection returns a copy of e marked as connected to instance since at, as istiod marks it.
func withConnection(e *config.Config, instance string, at time.Time) *config.Config {
	out := *e
	out.Annotations = maps.Clone(e.Annotations)
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[AnnotationController] = instance
	out.Annotations[AnnotationConnectedAt] = at.Format(timeFormat)
	delete(out.Annotations, AnnotationDisconnectedAt)
	return &out
}

// withDisconnection returns a copy of e marked as disconnected at at.
func withDisconnection(e *config.Config, at time.Time) *config.Config {
	out := *e
	out.Annotations = maps.Clone(e.Annotations)
	delete(out.Annotations, AnnotationConnectedAt)
	out.Annotations[AnnotationDisconnectedAt] = at.Format(timeFormat)
	return &out
}

// annotationTime reads a time annotation of e; zero when absent or unreadable.
func annotationTime(e *config.Config, name string) time.Time {
	t, _ := time.Parse(timeFormat, e.Annotations[name])
	return t
}

// checkIdentity is istiod's test that the connection may control entry e: its verified identity is of the
// entry's namespace and, when the entry names a service account, of that account.
func checkIdentity(p *model.Proxy, e *config.Config) error {
	if p.Identity == nil {
		return fmt.Errorf("registration of WorkloadEntry %s/%s requires a verified identity: the agent must connect to the secure port",
			e.Namespace, e.Name)
	}
	if p.Identity.Namespace != e.Namespace {
		return fmt.Errorf("registration of WorkloadEntry %s/%s: namespace mismatch: identity %s, entry %q", e.Namespace, e.Name,
			p.Identity, e.Namespace)
	}
	if sa := e.Spec.(*networking.WorkloadEntry).GetServiceAccount(); sa != "" && p.Identity.ServiceAccount != sa {
		return fmt.Errorf("registration of WorkloadEntry %s/%s: service account mismatch: identity %s, entry (its WorkloadGroup's "+
			"template.serviceAccount) %q", e.Namespace, e.Name, p.Identity, sa)
	}
	return nil
}
