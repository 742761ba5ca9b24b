// Package envoymodel evaluates an inbound request against Envoy resources (listeners, routes, clusters,
// endpoints) the way Envoy would, so tests can check what Sextant's generated config enforces without an
// Envoy binary. Config it does not model is an error, never a silent allow.
//
// Its semantics are taken from Envoy's source, not from Sextant's generators:
//
//   - Listener choice: source/server/active_tcp_socket.cc (newConnection: a listener with use_original_dst
//     hands a connection whose local address the original_dst filter restored to the listener bound to that
//     address, exact IP first, then 0.0.0.0 on the port, bind_to_port false included:
//     source/server/connection_handler_impl.cc findActiveTcpListenerByAddress); "raw_buffer" is the
//     transport protocol when no listener filter detected one.
//   - Listener filters: source/extensions/filters/listener/{original_dst,tls_inspector,http_inspector}.
//   - Filter chain match: source/common/listener_manager/filter_chain_manager_impl.cc (destination port,
//     destination IP, server name, transport protocol, application protocols, direct source IP, source
//     type, source IP, source port; at each step only the most specific matching chains go on, with no
//     backtracking; the default_filter_chain when none is left).
//   - HTTP connection manager: source/common/http/conn_manager_impl.cc and conn_manager_utility.cc (path
//     normalisation, the downstream remote address from x-forwarded-for), decoder filters run in order
//     until one stops the stream; the router is terminal (source/common/router/config_impl.cc for
//     virtual host and route selection).
//   - RBAC: source/extensions/filters/http/rbac/rbac_filter.cc, source/extensions/filters/network/rbac,
//     source/extensions/filters/common/rbac/engine_impl.cc (policies in name order, the first match is the
//     effective policy; ALLOW allows on a match, DENY on none, LOG always allows and writes
//     envoy.common/access_log_hint) and matchers.cc (and/or/not, header, url_path, destination
//     IP/port, source/direct_remote/remote IP, authenticated principal over URI SAN, DNS SAN, subject,
//     metadata, filter_state); shadow rules write SHADOW_PREFIX+shadow_effective_policy_id and
//     SHADOW_PREFIX+shadow_engine_result into the envoy.filters.http.rbac metadata.
//   - Matchers: source/common/http/header_utility.cc (an absent header matches only a present_match
//     false, or an inverted present_match true; values of a repeated header joined with ","),
//     source/common/common/matchers.cc (string, metadata and value matchers; url_path ignores the query).
//   - ext_authz: source/extensions/filters/http/ext_authz/ext_authz.cc and
//     source/extensions/filters/network/ext_authz (filter_enabled_metadata gates the check; a denied check
//     answers the service's status or 403; an error answers status_on_error, 403 by default, unless
//     failure_mode_allow), source/extensions/filters/common/ext_authz/ext_authz_grpc_impl.cc (an OK
//     gRPC status allows, any other denies; a failed call is an error; the timeout is the grpc_service's,
//     200 ms by default). The model makes a real envoy.service.auth.v3.Authorization/Check call to the
//     endpoint the grpc_service's cluster resolves to through CDS and EDS.
//   - jwt_authn: source/extensions/filters/http/jwt_authn/filter.cc (the first rule whose match fits the
//     request picks the requirement, none means no check; the extracted payloads go into the
//     envoy.filters.http.jwt_authn metadata; a failure answers 401, 403 for audiences not allowed),
//     verifier.cc (requires_all stops at the first failure; requires_any passes when one alternative
//     does, otherwise fails with the most telling error, and treats allow_missing and
//     allow_missing_or_failed as flags over the others' result), authenticator.cc (tokens verified
//     from the last extracted, every one unless failures or absence are allowed; issuer admitted by the
//     token's location, then nbf and exp with clock_skew_seconds, 60 by default, audiences, signature;
//     a verified token sets forward_payload_header and claim_to_headers, is removed unless forward,
//     and its payload goes under payload_in_metadata with space_delimited_claims split into lists) and
//     extractor.cc (the provider's headers with their value prefixes, params and cookies, else the
//     Authorization "Bearer " header and the access_token param). Keys come from local_jwks only.
package envoymodel
