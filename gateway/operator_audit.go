package gateway

import (
	"encoding/csv"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/citegate/citegate/gateway/web"
	"github.com/citegate/citegate/store"
)

// auditPageSize is how many audit entries one console page shows.
const auditPageSize = 100

// auditExportPage is how many entries an export reads per store call: each page is one short read
// transaction, so a long log never holds the database for the whole download.
const auditExportPage = 1000

// handleOperatorAudit lists the audit log newest first; ?before=ID continues below that id.
func (s *Server) handleOperatorAudit(w http.ResponseWriter, r *http.Request, u store.User) error {
	var before uint64
	if b := r.URL.Query().Get("before"); b != "" {
		v, err := strconv.ParseUint(b, 10, 64)
		if err != nil || v == 0 {
			return errBadRequest("before must be a positive audit entry id")
		}
		before = v
	}
	// One more than a page tells whether an older page exists.
	list, err := s.st.ListAudit(r.Context(), before, auditPageSize+1)
	if err != nil {
		return s.storeErr("list_audit", err)
	}
	page := web.OperatorPage{Lang: langOf(r), UserName: u.Name, Tab: "audit"}
	if len(list) > auditPageSize {
		list = list[:auditPageSize]
		page.OlderURL = "/operator/audit?before=" + strconv.FormatUint(list[len(list)-1].ID, 10)
	}
	for _, e := range list {
		page.Audit = append(page.Audit, web.AuditRow{ID: e.ID, Time: e.Time, Actor: e.Actor, Action: e.Action, Target: e.Target, Detail: e.Detail})
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := web.RenderOperator(w, page); err != nil {
		s.log.WarnContext(r.Context(), "render operator audit", "err", err)
	}
	return nil
}

// handleOperatorAuditExport downloads the whole log, oldest first, as JSONL (one store.AuditEntry per
// line) or CSV (id,time,actor_id,actor,action,target,detail). The export is itself audited before
// the first byte goes out, so the file ends with its own entry.
func (s *Server) handleOperatorAuditExport(w http.ResponseWriter, r *http.Request, u store.User) error {
	format := "jsonl"
	if strings.HasSuffix(r.URL.Path, ".csv") {
		format = "csv"
	}
	if _, err := s.st.AppendAudit(r.Context(), store.AuditEntry{
		ActorID: u.ID, Actor: u.Name, Action: store.AuditExport, Detail: format,
	}); err != nil {
		return s.storeErr("append_audit", err)
	}
	name := "citegate-audit-" + s.cfg.Now().UTC().Format("20060102-150405") + "." + format
	if format == "csv" {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson; charset=utf-8")
	}
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	w.Header().Set("X-Content-Type-Options", "nosniff")

	var write func(store.AuditEntry) error
	var flush func() error
	if format == "csv" {
		cw := csv.NewWriter(w)
		if err := cw.Write([]string{"id", "time", "actor_id", "actor", "action", "target", "detail"}); err != nil {
			return nil //nolint:nilerr // the client went away; nothing to answer
		}
		write = func(e store.AuditEntry) error {
			return cw.Write([]string{strconv.FormatUint(e.ID, 10), e.Time.UTC().Format(time.RFC3339Nano),
				csvCell(e.ActorID), csvCell(e.Actor), csvCell(e.Action), csvCell(e.Target), csvCell(e.Detail)})
		}
		flush = func() error { cw.Flush(); return cw.Error() }
	} else {
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		write = func(e store.AuditEntry) error { return enc.Encode(e) }
		flush = func() error { return nil }
	}
	rc := http.NewResponseController(w)
	var after uint64
	for {
		page, err := s.st.AuditSince(r.Context(), after, auditExportPage)
		if err != nil {
			// Headers (and maybe lines) are out: the cut-short file is the signal; the log says why.
			s.storeErr("audit_since", err)
			s.log.ErrorContext(r.Context(), "audit export cut short", "after", after, "err", err)
			return nil
		}
		for _, e := range page {
			if err := write(e); err != nil {
				return nil //nolint:nilerr // the client went away
			}
			after = e.ID
		}
		if err := flush(); err != nil {
			return nil //nolint:nilerr // the client went away
		}
		_ = rc.Flush()
		if len(page) < auditExportPage {
			return nil
		}
	}
}

// csvCell defuses spreadsheet formulas: a cell a spreadsheet would evaluate (starting with =, +, -,
// @, tab or carriage return) gets a leading apostrophe. User names and chat titles are chosen by
// users, and the CSV is meant to be opened in a spreadsheet.
func csvCell(v string) string {
	if v != "" && strings.ContainsRune("=+-@\t\r", rune(v[0])) {
		return "'" + v
	}
	return v
}
