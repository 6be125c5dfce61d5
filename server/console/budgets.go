package console

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/cairnflow/cairn/history"
	"github.com/cairnflow/cairn/internal/errmark"
	"github.com/cairnflow/cairn/sdk"
)

// budgetRow is a scope budget on the budgets page: its current window's
// counts as bars, and the tasks waiting on it.
type budgetRow struct {
	sdk.BudgetInfo
	Scope     string // what it covers, in words
	WindowEnd time.Time
	Units     []budgetUnit
	// Waiting are the tasks refused in its current window, which a raise
	// wakes; Earlier those refused in an earlier window, which a raise
	// of the current one does not (each tries again at its deadline).
	Waiting, Earlier []sdk.BudgetWaiter
}

// Wait says whether the budget makes the tasks it refuses wait.
func (b *budgetRow) Wait() bool { return b.Budget.OnExhausted == sdk.BudgetWait }

// budgetUnit is one limited unit of a budget's window (dollars or
// tokens): what is spent and reserved against its limit with raises.
type budgetUnit struct {
	Name                  string
	Text                  string // "$0.9700 spent, $0.0400 reserved, of $1.0000 ($0.5000 raised)"
	SpentPct, ReservedPct float64
	Over                  bool // spent past the limit: the overspend bound's share
}

// budgetUnits are the bars of a window: one per unit its budget limits.
func budgetUnits(b sdk.BudgetInfo) []budgetUnit {
	var units []budgetUnit
	add := func(name string, limit, spent, reserved, raised float64, f func(float64) string) {
		u := budgetUnit{Name: name, Text: fmt.Sprintf("%s spent, %s reserved, of %s", f(spent), f(reserved), f(limit+raised))}
		if raised > 0 {
			u.Text += fmt.Sprintf(" (%s raised)", f(raised))
		}
		if total := limit + raised; total > 0 {
			u.SpentPct = math.Min(100, 100*spent/total)
			u.ReservedPct = math.Min(100-u.SpentPct, 100*reserved/total)
			u.Over = spent > total
		}
		units = append(units, u)
	}
	if b.Budget.USD > 0 {
		add("USD", b.Budget.USD, b.SpentUSD, b.ReservedUSD, b.RaisedUSD, usdText)
	}
	if b.Budget.Tokens > 0 {
		add("tokens", float64(b.Budget.Tokens), float64(b.SpentTokens), float64(b.ReservedTokens), float64(b.RaisedTokens),
			func(f float64) string { return strconv.FormatInt(int64(f), 10) + " tokens" })
	}
	return units
}

func usdText(f float64) string { return fmt.Sprintf("$%.4f", f) }

// scopeText says what a scope budget covers.
func scopeText(s sdk.BudgetScope) string {
	switch {
	case s.FairnessKey != "":
		return "tenant (fairness key) " + s.FairnessKey
	case s.Type != "":
		return "tasks of type " + s.Type
	}
	return "every task of the namespace"
}

// budgetRefWaits are the tasks waiting on a budget the page lists no row
// for: a task's budget (task:<id>), or a scope budget deleted since.
type budgetRefWaits struct {
	Ref   string
	Tasks []sdk.BudgetWaiter
}

type budgetsData struct {
	Budgets []*budgetRow
	Others  []*budgetRefWaits
	Partial bool // the scan for waiting tasks stopped at its bound
}

// consoleBudgets lists the namespace's scope budgets with their current
// windows and the tasks waiting on each, and the tasks waiting on other
// budgets (tasks' own), with a form to raise each.
func (s *Console) consoleBudgets(w http.ResponseWriter, r *http.Request, c *call, page *consolePage) {
	page.Title, page.Page = "Budgets", "budgets"
	data := &budgetsData{}
	page.Data = data
	budgets, err := c.client.Budgets(r.Context())
	var waits sdk.BudgetWaitList
	if err == nil {
		waits, err = c.client.BudgetWaits(r.Context(), "")
	}
	if err != nil {
		page.Error = s.consoleError(r, err)
	}
	data.Partial = waits.Partial
	byRef := map[string]*budgetRow{}
	for _, b := range budgets {
		row := &budgetRow{BudgetInfo: b, Scope: scopeText(b.Scope), WindowEnd: b.WindowStart.Add(b.Budget.Window), Units: budgetUnits(b)}
		data.Budgets = append(data.Budgets, row)
		byRef[b.Ref] = row
	}
	others := map[string]*budgetRefWaits{}
	for _, wt := range waits.Tasks {
		row := byRef[wt.Budget]
		switch {
		case row != nil && wt.Window != nil && wt.Window.Equal(row.WindowStart):
			row.Waiting = append(row.Waiting, wt)
		case row != nil:
			row.Earlier = append(row.Earlier, wt)
		default:
			o := others[wt.Budget]
			if o == nil {
				o = &budgetRefWaits{Ref: wt.Budget}
				others[wt.Budget] = o
				data.Others = append(data.Others, o)
			}
			o.Tasks = append(o.Tasks, wt)
		}
	}
	s.render(w, http.StatusOK, "budgets", page)
}

// budgetWaitRow is a row of a table of tasks waiting on a budget.
type budgetWaitRow struct {
	Namespace string
	Wait      sdk.BudgetWaiter
	Earlier   bool // refused in an earlier window than the current one
}

// raiseForm is the Raise form of a budget, on the budgets page and on
// the page of a task waiting on it (Task: the form lands back there).
type raiseForm struct {
	Namespace, Ref, Task string
}

// consoleRaiseBudget raises a budget from a Raise form (ref; usd and/or
// tokens; reason) through Client.RaiseBudget, by the console's requester
// (console:<token name>), and lands back on the budgets page, or on the
// task page it was posted from (task), with the tasks it woke.
func (s *Console) consoleRaiseBudget(w http.ResponseWriter, r *http.Request, c *call, page *consolePage) {
	back := url.Values{"namespace": {c.namespace}}
	landing := "/console/budgets"
	if v := r.FormValue("task"); v != "" {
		id, err := uuid.Parse(v)
		if err != nil {
			s.consoleFail(w, r, page, http.StatusBadRequest, "not a task id")
			return
		}
		landing = "/console/tasks/" + url.PathEscape(id.String())
	}
	ref := strings.TrimSpace(r.FormValue("ref"))
	raise, err := raiseOf(r)
	var woken []uuid.UUID
	if err == nil {
		raise.By = consoleRequester(c.who)
		woken, err = c.client.RaiseBudget(r.Context(), ref, raise)
	}
	switch {
	case errors.Is(err, sdk.ErrNotFound):
		// Not the API's "no such task": the budget is what is missing.
		s.flash(back, c, "", "no such budget: "+ref+" (no scope budget of that reference is set, or that task has no budget of its own)")
	case err != nil:
		s.flash(back, c, "", s.consoleError(r, err))
	default:
		notice := fmt.Sprintf("Raised %s by %s (by %s): ", ref, spendText(raise.Tokens, raise.USD), raise.By)
		switch len(woken) {
		case 0:
			notice += "no task was waiting on it."
		case 1:
			notice += "woke 1 task."
		default:
			notice += fmt.Sprintf("woke %d tasks.", len(woken))
		}
		back.Set("flash", s.flashes.putTasks(c.who.Name(), notice, woken))
	}
	http.Redirect(w, r, s.path(landing+"?"+back.Encode()), http.StatusSeeOther)
}

// raiseOf reads a Raise form's amounts and reason: usd (a decimal, an
// optional "$") and tokens (a whole number), either empty for none.
func raiseOf(r *http.Request) (sdk.BudgetRaise, error) {
	var raise sdk.BudgetRaise
	if v := strings.TrimPrefix(strings.TrimSpace(r.FormValue("usd")), "$"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
			return raise, errmark.Mark(errors.Newf("raise: USD %q is not an amount of dollars >= 0", v), sdk.ErrInvalid)
		}
		raise.USD = f
	}
	if v := strings.TrimSpace(r.FormValue("tokens")); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return raise, errmark.Mark(errors.Newf("raise: tokens %q is not a whole number >= 0", v), sdk.ErrInvalid)
		}
		raise.Tokens = n
	}
	if raise.USD == 0 && raise.Tokens == 0 {
		return raise, errmark.Mark(errors.New("raise: give an amount in USD, in tokens or both"), sdk.ErrInvalid)
	}
	raise.Reason = strings.TrimSpace(r.FormValue("reason"))
	return raise, nil
}

// spendText is an amount of tokens and dollars: "4000 tokens · $0.0400",
// either alone when the other is 0.
func spendText(tokens int64, usd float64) string {
	switch {
	case tokens != 0 && usd != 0:
		return fmt.Sprintf("%d tokens · %s", tokens, usdText(usd))
	case tokens != 0:
		return fmt.Sprintf("%d tokens", tokens)
	}
	return usdText(usd)
}

// budgetRefsText names the budgets (and windows) of a ledger event.
func budgetRefsText(refs []history.BudgetWindowRef) string {
	names := make([]string, len(refs))
	for i, r := range refs {
		names[i] = r.String()
	}
	return strings.Join(names, ", ")
}

// budgetNote is a ledger event on the timeline, readable: amounts, the
// budgets, who raised. The empty string for any other event.
func budgetNote(data history.Payload) (title, text string) {
	switch p := data.(type) {
	case history.BudgetReservedData:
		return "Reserved", fmt.Sprintf("reserved %s for step %d (%s) against %s",
			spendText(p.Tokens, p.CostUSD), p.Position, p.Step, budgetRefsText(p.Budgets))
	case history.BudgetSettledData:
		if !p.Reserved {
			return "Charged", fmt.Sprintf("charged %s for step %d (%s), which declared no spend, to %s",
				spendText(p.Tokens, p.CostUSD), p.Position, p.Step, budgetRefsText(p.Budgets))
		}
		return "Settled", fmt.Sprintf("settled step %d (%s), %s: charged %s of %s reserved, to %s", p.Position, p.Step,
			strings.ReplaceAll(p.Reason, "_", " "), spendText(p.Tokens, p.CostUSD), spendText(p.ReservedTokens, p.ReservedUSD),
			budgetRefsText(p.Budgets))
	case history.BudgetRefusedData:
		text := fmt.Sprintf("over budget %s: step %d (%s) asked %s with %s spent and %s reserved of %s",
			p.Budget, p.Position, p.Step, spendText(p.Tokens, p.CostUSD), spendText(p.SpentTokens, p.SpentUSD),
			spendText(p.ReservedTokens, p.ReservedUSD), spendText(p.LimitTokens, p.LimitUSD))
		if p.Action == history.BudgetWait && p.Deadline != nil {
			return "Over budget", text + "; waiting for a raise until " + consoleTime(*p.Deadline)
		}
		return "Over budget", text + "; the task fails (budget_exhausted)"
	case history.BudgetRaisedData:
		text := fmt.Sprintf("budget %s raised by %s by %s", p.Budget, spendText(p.Tokens, p.USD), p.By)
		if p.Reason != "" {
			text += " (" + p.Reason + ")"
		}
		return "Budget raised", text + ": limit now " + spendText(p.LimitTokens, p.LimitUSD)
	}
	return "", ""
}
