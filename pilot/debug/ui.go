package debug

import (
	_ "embed"
	"net/http"
)

// uiPage is the dashboard: plain HTML and a little JavaScript polling the JSON views every 2 seconds.
//
//go:embed ui/index.html
var uiPage []byte

func (d *Debug) handleUI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(uiPage)
}
