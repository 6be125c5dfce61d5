package console

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/sdk"
	"github.com/google/uuid"
)

// The children panel of a parent's task page: its child workflows by
// position, from its own history (child_started, child_finished), a page
// of them at a time. A finished child's status, times and error are in
// the parent's log; only the unfinished children of the page shown are
// read, in one [sdk.Client.Statuses], for their current status.
// A fan-out of thousands thus costs the page one history read (which the
// page makes anyway) and one query of at most childrenPageSize rows.

// childrenPageSize is how many children a page of the panel lists.
const childrenPageSize = 50

// childUnderWay is the filter, and the summary's word, for the children
// that have not finished (pending, running, retrying: their rows say).
const childUnderWay = "under_way"

// childrenPanel is the panel: Summary counts every child, Rows are the
// page shown (filtered by Filter, a terminal status or childUnderWay).
type childrenPanel struct {
	Total   int
	Summary string
	Counts  []childCount
	Rows    []*childRow
	Filter  string
	Matched int // children the filter matches
	// First and Last are the positions in Rows' ordinal range, for "51–100
	// of 300"; Prev and Next the URLs of the pages around it.
	First, Last int
	Prev, Next  string
	All         string // the panel unfiltered
	Query       string // the panel's own query (filter, page), for the page's refresh
}

// childCount is a count of the summary: Value is its filter, Link the
// panel showing only those.
type childCount struct {
	Value, Label, Link string
	N                  int
}

// childRow is one child.
type childRow struct {
	Position          int
	ID                string
	Type              string
	TypeVersion       int
	Status            history.Status // "" when its row could not be read
	Finished          bool
	Started, FinishAt time.Time
	Error             string // the evidence of a child that did not complete
	Cost              string // its roll-up's cost with its descendants (consoleBatchCost)
}

// childSummaryOrder is the order of the summary's counts.
var childSummaryOrder = []history.Status{history.StatusCompleted, history.StatusFailed, history.StatusDeadLettered,
	history.StatusCancelled, history.StatusExpired}

// childrenOf reads a parent's children from its history, by position.
func childrenOf(events []history.Event) []*childRow {
	var rows []*childRow
	for _, e := range events {
		switch p := e.Data.(type) {
		case history.ChildStartedData:
			rows = append(rows, &childRow{Position: p.Position, ID: p.ChildID, Type: p.TaskType, TypeVersion: p.TypeVersion, Started: e.At})
		case history.ChildFinishedData:
			if p.Position < 0 || p.Position >= len(rows) || rows[p.Position].ID != p.ChildID {
				continue // a history replay would refuse; the page shows what it can
			}
			r := rows[p.Position]
			r.Finished, r.Status, r.FinishAt = true, p.Status, e.At
			if p.Error != nil {
				r.Error = p.Error.Message
			}
		}
	}
	return rows
}

// buildChildrenPanel lays out the panel of the task id from its history:
// nil for a task with no children. filter and page come from the page's
// query (children, children_page); rowsOf reads the current rows of the
// unfinished children shown.
func buildChildrenPanel(ctx context.Context, events []history.Event, filter string, page int,
	link func(url.Values) string, rowsOf func(context.Context, []uuid.UUID) (map[uuid.UUID]history.Status, error)) (*childrenPanel, error) {
	all := childrenOf(events)
	if len(all) == 0 {
		return nil, nil
	}
	p := &childrenPanel{Total: len(all)}
	counts := map[string]int{}
	for _, r := range all {
		if r.Finished {
			counts[string(r.Status)]++
		} else {
			counts[childUnderWay]++
		}
	}
	parts := []string{}
	for _, st := range childSummaryOrder {
		if n := counts[string(st)]; n > 0 {
			p.Counts = append(p.Counts, childCount{Value: string(st), Label: strings.ReplaceAll(string(st), "_", "-"), N: n})
			parts = append(parts, fmt.Sprintf("%s %s", thousands(n), strings.ReplaceAll(string(st), "_", "-")))
		}
	}
	if n := counts[childUnderWay]; n > 0 {
		p.Counts = append(p.Counts, childCount{Value: childUnderWay, Label: "under way", N: n})
		parts = append(parts, thousands(n)+" under way")
	}
	noun := "children"
	if len(all) == 1 {
		noun = "child"
	}
	p.Summary = fmt.Sprintf("%s %s: %s", thousands(len(all)), noun, strings.Join(parts, ", "))

	if filter != childUnderWay && !history.Status(filter).Terminal() {
		filter = ""
	}
	p.Filter = filter
	var matched []*childRow
	for _, r := range all {
		switch {
		case filter == "",
			filter == childUnderWay && !r.Finished,
			r.Finished && string(r.Status) == filter:
			matched = append(matched, r)
		}
	}
	p.Matched = len(matched)
	pages := max(1, (len(matched)+childrenPageSize-1)/childrenPageSize)
	page = min(max(page, 1), pages)
	from := (page - 1) * childrenPageSize
	p.Rows = matched[from:min(from+childrenPageSize, len(matched))]
	if len(p.Rows) > 0 {
		p.First, p.Last = from+1, from+len(p.Rows)
	}
	query := func(page int) url.Values {
		q := url.Values{}
		if filter != "" {
			q.Set("children", filter)
		}
		if page > 1 {
			q.Set("children_page", strconv.Itoa(page))
		}
		return q
	}
	p.Query = query(page).Encode()
	p.All = link(url.Values{})
	for i := range p.Counts {
		p.Counts[i].Link = link(url.Values{"children": {p.Counts[i].Value}})
	}
	if page > 1 {
		p.Prev = link(query(page - 1))
	}
	if page < pages {
		p.Next = link(query(page + 1))
	}

	// The unfinished children shown: their status is their row's.
	var ids []uuid.UUID
	for _, r := range p.Rows {
		if !r.Finished {
			if cid, err := uuid.Parse(r.ID); err == nil {
				ids = append(ids, cid)
			}
		}
	}
	if len(ids) > 0 {
		status, err := rowsOf(ctx, ids)
		if err != nil {
			return nil, err
		}
		for _, r := range p.Rows {
			if !r.Finished {
				cid, _ := uuid.Parse(r.ID)
				r.Status = status[cid]
			}
		}
	}
	return p, nil
}

// thousands writes n with commas between groups of three digits.
func thousands(n int) string {
	if n < 0 {
		return "-" + thousands(-n)
	}
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// parentLink is a child's way up: its parent's id, type (when the parent
// could be read) and the child's position among the parent's children.
type parentLink struct {
	ID       uuid.UUID
	Type     string
	Position int
}

// consoleChildren fills the task page's children panel and parent link.
func (s *Console) consoleChildren(ctx context.Context, c *call, info *sdk.TaskInfo, events []history.Event, q url.Values, data *taskData) error {
	if info.ParentID != nil {
		data.Parent = &parentLink{ID: *info.ParentID, Position: info.ParentPosition}
		if parent, err := c.client.Get(ctx, *info.ParentID); err == nil {
			data.Parent.Type = fmt.Sprintf("%s@%d", parent.Type, parent.TypeVersion)
		}
	}
	page, _ := strconv.Atoi(q.Get("children_page"))
	link := func(v url.Values) string {
		v.Set("namespace", c.namespace)
		return s.path("/console/tasks/"+url.PathEscape(info.ID.String())+"?"+v.Encode()) + "#task-children"
	}
	// A child is in its parent's namespace, the client's.
	panel, err := buildChildrenPanel(ctx, events, q.Get("children"), page, link, c.client.Statuses)
	if err != nil {
		return err
	}
	data.Children = panel
	return nil
}
