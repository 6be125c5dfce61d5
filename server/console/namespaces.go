package console

import (
	"net/http"

	"github.com/cairnflow/cairn/cairntype"
)

type namespacesData struct {
	Namespaces []cairntype.NamespaceConfig
	Cells      bool // the listing is over cells: show each row's cell
}

// consoleNamespaces lists the namespaces the token may act in, with their
// retention and, over a placement map, the cell holding each (a name in
// two cells is a move's leftover in one of them).
func (s *Console) consoleNamespaces(w http.ResponseWriter, r *http.Request, c *call, page *consolePage) {
	data := &namespacesData{}
	page.Title, page.Page, page.Data = "Namespaces", "namespaces", data
	list := c.client.Namespaces
	if s.cfg.Namespaces != nil {
		list = s.cfg.Namespaces
	}
	all, err := list(r.Context())
	if err != nil {
		page.Error = s.consoleError(r, err)
	}
	for _, ns := range all {
		if !c.who.InNamespace(ns.Name) {
			continue // not even its name
		}
		data.Cells = data.Cells || ns.Cell != ""
		data.Namespaces = append(data.Namespaces, ns)
	}
	s.render(w, http.StatusOK, "namespaces", page)
}
