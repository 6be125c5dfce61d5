package console

import (
	"net/http"
	"time"

	"github.com/cairnflow/cairn/cairntype"
	"github.com/cairnflow/cairn/sdk"
)

// strandedGroup is the stranded tasks of one type and version, as the
// stranded page shows them.
type strandedGroup struct {
	Type    string
	Version int
	// First is the first task found: its divergence heads the group.
	First sdk.StrandedTask
	Tasks []sdk.StrandedTask
}

type strandedData struct {
	Type   string
	Groups []*strandedGroup
	Full   bool // the listing's bound was reached
}

// consoleStrandedLimit bounds the findings the stranded page reads.
const consoleStrandedLimit = 1000

// consoleStranded lists, by type and version, the in-flight tasks
// workers' deploy checks found their code cannot replay, with where the
// code parts from each history (?type= narrows it to one type).
func (s *Console) consoleStranded(w http.ResponseWriter, r *http.Request, c *call, page *consolePage) {
	data := &strandedData{Type: r.URL.Query().Get("type")}
	page.Title, page.Page, page.Data = "Stranded", "stranded", data
	found, err := c.client.StrandedTasks(r.Context(), &sdk.StrandedOpts{Type: data.Type, Limit: consoleStrandedLimit})
	if err != nil {
		page.Error = s.consoleError(r, err)
	}
	data.Full = len(found) == consoleStrandedLimit
	index := map[[2]any]*strandedGroup{}
	for _, f := range found {
		key := [2]any{f.Type, f.TypeVersion}
		g := index[key]
		if g == nil {
			g = &strandedGroup{Type: f.Type, Version: f.TypeVersion, First: f}
			index[key] = g
			data.Groups = append(data.Groups, g)
		}
		g.Tasks = append(g.Tasks, f)
	}
	s.render(w, http.StatusOK, "stranded", page)
}

// queueStranded is the queue page's card of tasks no running worker will
// take: its diagnosis' stranded types, and the versions no worker ran in
// the last quarter hour.
type queueStranded struct {
	Stranded []cairntype.StrandedType
	Unserved []cairntype.WaitingType
}

// queueStrandedWindow is the window of the queue page's diagnosis.
const queueStrandedWindow = 15 * time.Minute

func strandedOf(d *cairntype.QueueDiagnosis) queueStranded {
	q := queueStranded{Stranded: d.Stranded}
	for _, t := range d.WaitingByType {
		if !t.Served && t.Due > 0 {
			q.Unserved = append(q.Unserved, t)
		}
	}
	return q
}
