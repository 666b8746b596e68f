package benchlimit

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/riftflow/riftflow/internal/sim"
)

// PrintTable writes rs as a Markdown table, sorted by case and N (rs is
// sorted in place).
func PrintTable(w io.Writer, rs []Result) {
	sort.SliceStable(rs, func(i, j int) bool {
		if rs[i].Case.Name != rs[j].Case.Name {
			return rs[i].Case.Name < rs[j].Case.Name
		}
		return rs[i].Case.N < rs[j].Case.N
	})
	fmt.Fprintln(w, "| case | key | N | whole long windows | served | used (tightest window) | mean gap | 429s app/method/service | peak over budget | over during outage | blacklists | 403s | load avg (max) | throttled periods |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		outage := "—"
		if !r.OutageFrom.IsZero() {
			outage = strconv.Itoa(r.OverOutage)
		}
		thr := "—"
		if r.ThrottledFor > 0 || r.Throttled > 0 {
			thr = fmt.Sprintf("%.0f %% (%.0f s)", 100*r.Throttled, r.ThrottledFor.Seconds())
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d × %d s | %d | %.3f | %d ms | %d/%d/%d | %d | %s | %d | %d | %.1f (%.1f) | %s |\n",
			r.Case.Name, r.Case.Key.App, r.Case.N, r.Windows, r.LongSecs, r.Served, r.Used, r.Gap.Milliseconds(),
			r.TooMany["application"], r.TooMany["method"], r.TooMany["service"], r.Over, outage, r.Blacklisted, r.Forbidden,
			r.Load, r.LoadMax, thr)
	}
}

// WriteResults writes rs to path as CSV, one row per case and N.
func WriteResults(path string, rs []Result) error {
	var sb strings.Builder
	sb.WriteString("case,key,n,skew_ms,kill_s,windows,window_s,limit,served,used,gap_ms,app429,method429,service429,over,over_outage,blacklists,forbidden,elapsed_s,load,load_max,throttled,throttled_s\n")
	for _, r := range rs {
		fmt.Fprintf(&sb, "%s,%q,%d,%d,%.0f,%d,%d,%d,%d,%.4f,%d,%d,%d,%d,%d,%d,%d,%d,%.0f,%.2f,%.2f,%.3f,%.1f\n",
			r.Case.Name, r.Case.Key.App, r.Case.N, r.Case.SkewMS, r.Case.KillFor.Seconds(), r.Windows, r.LongSecs, r.LongLimit,
			r.Served, r.Used, r.Gap.Milliseconds(), r.TooMany["application"], r.TooMany["method"], r.TooMany["service"],
			r.Over, r.OverOutage, r.Blacklisted, r.Forbidden, r.Elapsed.Seconds(), r.Load, r.LoadMax, r.Throttled, r.ThrottledFor.Seconds())
	}
	return os.WriteFile(path, []byte(sb.String()), 0o644)
}

// WindowUse measures the ended instances h of a window of length win and
// limit that started at or after t0: used = the requests counted in all
// but the last ÷ what limit per win allows from the first one's start to
// the last one's (the idle time between windows counts as unused); fill
// is their mean count ÷ limit, gap the mean idle time between one
// window's end and the next one's start, n the number of instances.
// With fewer than 2 instances everything is 0.
func WindowUse(h []sim.WindowInstance, t0 time.Time, limit int, win time.Duration) (used, fill float64, gap time.Duration, n int) {
	kept := Since(h, t0)
	n = len(kept)
	if n < 2 {
		return 0, 0, 0, n
	}
	var count int
	for _, w := range kept[:n-1] {
		count += w.Count
	}
	span := kept[n-1].Start.Sub(kept[0].Start)
	used = float64(count) / (float64(limit) * span.Seconds() / win.Seconds())
	fill = float64(count) / float64(limit*(n-1))
	gap = (span - time.Duration(n-1)*win) / time.Duration(n-1)
	return used, fill, gap, n
}

// WriteWindowCSV writes one row per window instance: window length (s),
// start (s since t0, negative before it), count, limit; windows in
// ascending length, instances in order.
func WriteWindowCSV(path string, t0 time.Time, hist map[int][]sim.WindowInstance, limits map[int]int) error {
	secs := make([]int, 0, len(hist))
	for s := range hist {
		secs = append(secs, s)
	}
	sort.Ints(secs)
	var sb strings.Builder
	sb.WriteString("window_s,start_s,count,limit\n")
	for _, s := range secs {
		for _, w := range hist[s] {
			fmt.Fprintf(&sb, "%d,%.3f,%d,%d\n", s, w.Start.Sub(t0).Seconds(), w.Count, limits[s])
		}
	}
	return os.WriteFile(path, []byte(sb.String()), 0o644)
}

// WriteWindowSVG plots each window instance as a bar (its count) against
// a red line at the limit, one bar per instance, in order; instances that
// started before t0 are grey.
func WriteWindowSVG(path, title string, t0 time.Time, hist []sim.WindowInstance, limit int) error {
	const w, h, pad = 640, 320, 40
	top := float64(limit) * 1.2
	for _, x := range hist {
		top = max(top, float64(x.Count)*1.1)
	}
	y := func(v float64) float64 { return h - pad - v/top*(h-2*pad) }
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", w, h)
	fmt.Fprintf(&sb, `<text x="%d" y="16">%s</text>`+"\n", pad, title)
	bw := float64(w-2*pad) / float64(max(1, len(hist)))
	for i, x := range hist {
		fill := "#4a7"
		if x.Start.Before(t0) {
			fill = "#aaa" // warm-up
		}
		fmt.Fprintf(&sb, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>start %+.1f s: %d</title></rect>`+"\n",
			float64(pad)+float64(i)*bw+1, y(float64(x.Count)), bw-2, y(0)-y(float64(x.Count)), fill, x.Start.Sub(t0).Seconds(), x.Count)
	}
	fmt.Fprintf(&sb, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="red"/><text x="%d" y="%.1f" fill="red">limit %d</text>`+"\n",
		pad, w-pad, y(float64(limit)), y(float64(limit)), w-pad-60, y(float64(limit))-4, limit)
	fmt.Fprintf(&sb, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="black"/>`+"\n", pad, w-pad, y(0), y(0))
	sb.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(sb.String()), 0o644)
}

// WriteStartSVG plots two panels of span each, on a time axis from first
// (the first request): [0, span) and [late, late+span). Each window
// instance of length win is a bar over its time with its count; the red
// steps are a perfect client's limit per window, back to back from 0.
func WriteStartSVG(path, title string, first time.Time, late, span time.Duration, h []sim.WindowInstance, limit int, win time.Duration) error {
	const pw, ph, pad = 600, 260, 40
	top := float64(limit) * 1.25
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", pw, 2*ph+30)
	fmt.Fprintf(&sb, `<text x="%d" y="16">%s</text>`+"\n", 10, title)
	for i, from := range []time.Duration{0, late} {
		oy := 30 + float64(i*ph)
		x := func(d time.Duration) float64 { return pad + (d-from).Seconds()/span.Seconds()*(pw-2*pad) }
		y := func(v float64) float64 { return oy + ph - pad - v/top*(ph-2*pad) }
		label := "cold start"
		if i == 1 {
			label = "steady state"
		}
		fmt.Fprintf(&sb, `<text x="%d" y="%.1f">%s: %.0f–%.0f s after the first request</text>`+"\n", pad, oy+12, label, from.Seconds(), (from + span).Seconds())
		for _, w := range h {
			at := w.Start.Sub(first)
			if at < from || at >= from+span {
				continue
			}
			x0, x1 := x(at), min(x(at+win), pw-pad)
			fmt.Fprintf(&sb, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#4a7"><title>%+.2f s: %d</title></rect>`+"\n",
				x0+0.5, y(float64(w.Count)), max(x1-x0-1, 1), y(0)-y(float64(w.Count)), at.Seconds(), w.Count)
		}
		for k := from.Truncate(win); k < from+span; k += win {
			if k < from {
				continue
			}
			fmt.Fprintf(&sb, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="red"/>`+"\n", x(k), min(x(k+win), pw-pad), y(float64(limit)), y(float64(limit)))
		}
		fmt.Fprintf(&sb, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="black"/>`+"\n", pad, pw-pad, y(0), y(0))
		for s := from; s <= from+span; s += time.Second {
			fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" text-anchor="middle">%.0f</text>`+"\n", x(s), y(0)+14, s.Seconds())
		}
		fmt.Fprintf(&sb, `<text x="%d" y="%.1f" fill="red">perfect client: %d per window</text>`+"\n", pw-pad-170, y(float64(limit))-4, limit)
	}
	sb.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(sb.String()), 0o644)
}
