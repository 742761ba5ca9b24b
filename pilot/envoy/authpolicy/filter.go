package authpolicy

import (
	"log/slog"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

func httpFilter(name string, m proto.Message) *hcm.HttpFilter {
	return &hcm.HttpFilter{Name: name, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: typedConfig(m)}}
}

func networkFilter(name string, m proto.Message) *listener.Filter {
	return &listener.Filter{Name: name, ConfigType: &listener.Filter_TypedConfig{TypedConfig: typedConfig(m)}}
}

// typedConfig marshals m deterministically (RBAC policies are maps), so equal filters have equal bytes
// and listeners built from them compare equal.
func typedConfig(m proto.Message) *anypb.Any {
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		// Only an invalid message fails to marshal; every message here is built in this package.
		slog.Error("authpolicy: marshal", "type", proto.MessageName(m), "err", err)
	}
	return a
}
