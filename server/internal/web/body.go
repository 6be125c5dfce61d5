package web

import (
	"net/http"
	"strconv"
)

// EnvelopeBytes is what a request body may hold besides a payload: an
// API start's body may be its input's bound plus this, an action's body
// (cancel and its reason, a retry) this; a console form takes the same
// bounds as the API request it stands for.
const EnvelopeBytes = 64 << 10

// WriteBlob sends a blob's bytes as a download, never rendered in place.
func WriteBlob(w http.ResponseWriter, data []byte, contentType string) {
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Disposition", "attachment")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}
