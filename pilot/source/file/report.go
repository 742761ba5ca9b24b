package file

import (
	"fmt"

	"github.com/sextantmesh/sextant/pilot/config"
)

// reportedPerFile is how many errors, and how many warnings, one file reports one by one; the rest are
// counted in one more entry. A file of a million broken documents must not log a million lines.
const reportedPerFile = 10

// securityKinds are the kinds whose loss opens traffic: a policy that is not served allows what it denied.
// Files holding them are read only once quiet when written in place, and withdrawn only once quiet.
var securityKinds = map[config.Kind]bool{
	config.AuthorizationPolicy:   true,
	config.PeerAuthentication:    true,
	config.RequestAuthentication: true,
}

// capReported keeps the first reportedPerFile of errs (errors or warnings of one file, in document order)
// and counts the rest in one entry more.
func capReported(path string, errs []*config.Error) []*config.Error {
	if len(errs) <= reportedPerFile {
		return errs
	}
	rest := errs[reportedPerFile:]
	what := "rejected documents"
	if rest[0].Warning {
		what = "warnings"
	}
	summary := &config.Error{File: path, Index: rest[0].Index, Kind: summaryKind(rest), Warning: rest[0].Warning,
		Message: fmt.Sprintf("%d more %s in this file, from document %d on, not listed one by one (the first %d are)",
			len(rest), what, rest[0].Index, reportedPerFile)}
	return append(errs[:reportedPerFile:reportedPerFile], summary)
}

// summaryKind is the kind a count of errs is filed under: none if one of them could not tell its kind (it may
// be a security object), else a security kind among them, else the first one's.
func summaryKind(errs []*config.Error) string {
	kind := errs[0].Kind
	for _, e := range errs {
		switch {
		case e.Kind == "":
			return ""
		case securityKinds[config.Kind(e.Kind)]:
			kind = e.Kind
		}
	}
	return kind
}

// logCapped logs the first reportedPerFile of errs one by one and the rest as a count.
func (s *Source) logCapped(msg, attr, path string, errs []*config.Error) {
	for i, e := range errs {
		if i == reportedPerFile {
			s.opts.Logger.Warn(msg, "file", path, attr, fmt.Sprintf("%d more not logged", len(errs)-i))
			return
		}
		s.opts.Logger.Warn(msg, attr, e.Error())
	}
}
