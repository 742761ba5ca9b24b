package main

import (
	"errors"

	"google.golang.org/protobuf/encoding/protowire"
)

// The simulated sidecars read delta responses off the wire themselves (h2Stream): a response is scanned
// for its names and payload bytes, and each distinct payload is decoded once for the whole fleet (decoder).
// Decoding every response into messages, as the generated client does, cost the harness as much CPU as
// the server at cold start (805 MB of payload), and the harness shares the server's cores.

// deltaMethod is the delta ADS method.
const deltaMethod = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"

// deltaResponse is what the harness uses of a DeltaDiscoveryResponse; strings and payloads point into the frame.
type deltaResponse struct {
	size             int // bytes on the wire (the message, as proto.Size counts it)
	TypeUrl, Nonce   string
	Resources        []wireResource
	RemovedResources []string
}

// wireResource is a discovery.Resource: its name, version and the value of its Any. Version points into the
// frame like Value: a proxy keeps the version through the shared info (see decoder.decode), not a copy each.
type wireResource struct {
	Name    string
	Version []byte
	Value   []byte
}

var errTruncated = errors.New("delta response: truncated field")

// parseDeltaResponse reads the fields of envoy.service.discovery.v3.DeltaDiscoveryResponse the harness needs
// (type_url 4, nonce 5, resources 2, removed_resources 6) and skips the rest.
func parseDeltaResponse(b []byte) (*deltaResponse, error) {
	r := &deltaResponse{size: len(b)}
	err := eachField(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 2:
			res, err := parseResource(v)
			if err != nil {
				return err
			}
			r.Resources = append(r.Resources, res)
		case 4:
			r.TypeUrl = string(v)
		case 5:
			r.Nonce = string(v)
		case 6:
			r.RemovedResources = append(r.RemovedResources, string(v))
		}
		return nil
	})
	return r, err
}

// parseResource reads envoy.service.discovery.v3.Resource: name 3, version 1 and resource 2 (a
// google.protobuf.Any, whose value is field 2).
func parseResource(b []byte) (wireResource, error) {
	var res wireResource
	err := eachField(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 3:
			res.Name = string(v)
		case 1:
			res.Version = v
		case 2:
			return eachField(v, func(num protowire.Number, v []byte) error {
				if num == 2 {
					res.Value = v
				}
				return nil
			})
		}
		return nil
	})
	return res, err
}

// eachField calls f with the number and bytes of every length-delimited field of the message b; fields of
// other wire types are skipped.
func eachField(b []byte, f func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return errTruncated
		}
		if err := f(num, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}
