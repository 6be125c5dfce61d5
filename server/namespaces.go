package server

import (
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/cairnflow/cairn/sdk"
	"github.com/cairnflow/cairn/server/internal/web"
)

// namespaceView is GET/PUT /v1/namespace: the request's namespace's
// retention settings in seconds, null for the default of the process that
// runs retention.
type namespaceView struct {
	Namespace           string   `json:"namespace"`
	RetentionSeconds    *float64 `json:"retention_seconds"`
	KeyRetentionSeconds *float64 `json:"key_retention_seconds"`
	// Archive is where retention writes the namespace's histories before
	// it removes them; null: the leader's default.
	Archive *string `json:"archive"`
	// OldestFinishedAt is when the oldest finished task the namespace
	// still keeps finished (absent: it keeps none).
	OldestFinishedAt *time.Time `json:"oldest_finished_at,omitempty"`
	// TypeRetentionSeconds are the task types with a retention of their
	// own, in place of the namespace's for their tasks.
	TypeRetentionSeconds map[string]float64 `json:"type_retention_seconds,omitempty"`
	// StreamTTLSeconds is how long the namespace keeps its tasks' stream
	// entries; absent: as long as their tasks.
	StreamTTLSeconds *float64 `json:"stream_ttl_seconds,omitempty"`
}

// namespaceRequest is the body of PUT /v1/namespace. A setting left out
// or null takes the default.
type namespaceRequest struct {
	RetentionSeconds    *float64 `json:"retention_seconds"`
	KeyRetentionSeconds *float64 `json:"key_retention_seconds"`
	// Archive is refused: where the server writes (a directory, an S3
	// endpoint it signs requests to with its credentials) is set with the
	// CLI or the SDK by whoever runs it, not by a token holder.
	Archive *string `json:"archive"`
	// TypeRetentionSeconds replaces the task types' own retentions (left
	// out: they stay as they are; {}: none).
	TypeRetentionSeconds map[string]*float64 `json:"type_retention_seconds"`
	// StreamTTLSeconds: left out or null, stream entries go with their
	// tasks.
	StreamTTLSeconds *float64 `json:"stream_ttl_seconds"`
}

// maxRetention bounds a retention setting well inside time.Duration.
const maxRetention = 100 * 365 * 24 * time.Hour

func (s *Server) getNamespace(w http.ResponseWriter, r *http.Request, c *call) {
	ns, err := c.client.NamespaceConfig(r.Context(), c.namespace)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	view := namespaceView{Namespace: c.namespace,
		RetentionSeconds: seconds(ns.Retention), KeyRetentionSeconds: seconds(ns.KeyRetention), StreamTTLSeconds: seconds(ns.StreamTTL)}
	if ns.Archive != "" {
		view.Archive = &ns.Archive
	}
	if !ns.OldestFinished.IsZero() {
		at := ns.OldestFinished.UTC()
		view.OldestFinishedAt = &at
	}
	for typ, d := range ns.TypeRetention {
		if view.TypeRetentionSeconds == nil {
			view.TypeRetentionSeconds = map[string]float64{}
		}
		view.TypeRetentionSeconds[typ] = d.Seconds()
	}
	writeJSON(w, http.StatusOK, view)
}

// putNamespace replaces the namespace's settings; they apply from the
// leader's next pass.
func (s *Server) putNamespace(w http.ResponseWriter, r *http.Request, c *call) {
	var req namespaceRequest
	if p := decodeBody(w, r, web.EnvelopeBytes, &req, false); p != nil {
		s.writeProblem(w, r, p)
		return
	}
	var settings sdk.NamespaceSettings
	for _, f := range []struct {
		name string
		in   *float64
		out  *time.Duration
	}{
		{"retention_seconds", req.RetentionSeconds, &settings.Retention},
		{"key_retention_seconds", req.KeyRetentionSeconds, &settings.KeyRetention},
		{"stream_ttl_seconds", req.StreamTTLSeconds, &settings.StreamTTL},
	} {
		d, p := retentionSetting(f.name, f.in)
		if p != nil {
			s.writeProblem(w, r, p)
			return
		}
		*f.out = d
	}
	for typ, v := range req.TypeRetentionSeconds {
		if v == nil {
			s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest,
				"type_retention_seconds of "+strconv.Quote(typ)+" is null: leave the type out to give it the namespace's retention"))
			return
		}
		d, p := retentionSetting("type_retention_seconds of "+strconv.Quote(typ), v)
		if p != nil {
			s.writeProblem(w, r, p)
			return
		}
		if settings.TypeRetention == nil {
			settings.TypeRetention = map[string]time.Duration{}
		}
		settings.TypeRetention[typ] = d
	}
	if req.Archive != nil {
		s.writeProblem(w, r, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest,
			"archive is not set over HTTP (it names where the server writes, with its credentials): use cairn namespace set --archive"))
		return
	}
	// The archive stays as it is.
	current, err := c.client.NamespaceConfig(r.Context(), c.namespace)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	settings.Archive = current.Archive
	if req.TypeRetentionSeconds == nil {
		// Left out: the types keep theirs (a type on a legal hold is not
		// moved to the namespace's retention by a PUT about the rest);
		// {} removes them.
		settings.TypeRetention = current.TypeRetention
	}
	if err := c.client.SetNamespace(r.Context(), c.namespace, settings); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.getNamespace(w, r, c)
}

// retentionSetting is a setting of PUT /v1/namespace as a duration: 0 for
// null (the default), else between 1ms and maxRetention.
func retentionSetting(name string, v *float64) (time.Duration, *Problem) {
	if v == nil {
		return 0, nil
	}
	if math.IsNaN(*v) || *v < 0.001 || *v > maxRetention.Seconds() {
		return 0, web.NewProblem(http.StatusBadRequest, web.CodeInvalidRequest, name+" "+strconv.FormatFloat(*v, 'g', -1, 64)+
			" is not a number of seconds between 0.001 and "+strconv.FormatFloat(maxRetention.Seconds(), 'f', 0, 64)+" (null: the default)")
	}
	return time.Duration(*v * float64(time.Second)), nil
}

// seconds is d in seconds, nil for 0 (the default).
func seconds(d time.Duration) *float64 {
	if d == 0 {
		return nil
	}
	v := d.Seconds()
	return &v
}

// getBlob sends a blob's bytes (a step kept them out of the history with
// activities.PutBlob; histories and outputs hold its reference, whose key
// names it here), checked against the digest written with them.
func (s *Server) getBlob(w http.ResponseWriter, r *http.Request, c *call) {
	data, contentType, err := c.client.ReadBlob(r.Context(), r.PathValue("key"))
	if err != nil {
		if errors.Is(err, sdk.ErrBlobCorrupt) {
			s.log.Error("damaged blob", "namespace", c.namespace, slog.String("error", err.Error()))
		}
		s.writeError(w, r, err)
		return
	}
	web.WriteBlob(w, data, contentType)
}
