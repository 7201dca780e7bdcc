//! The run directory: `history.jsonl` (written as the run goes),
//! `results.json` and a self-contained `index.html` (inline SVG and JS, no
//! external assets): a timeline of operations by process with nemesis
//! windows shaded, latency over time, offending operations highlighted.

use std::path::Path;

use anyhow::Context;
use serde::Serialize;
use serde_json::json;

use crate::checker::{CheckResult, Validity};
use crate::history::{Event, OpType, Process};

/// `results.json`.
#[derive(Clone, Debug, Serialize)]
pub struct Results {
    /// True when no checker found a violation and none was undecided.
    pub valid: bool,
    /// Run parameters (seed, nodes, nemeses, ...).
    pub run: serde_json::Value,
    /// One entry per checker.
    pub checkers: Vec<CheckResult>,
    /// Operation counts by f and type.
    pub stats: serde_json::Value,
    /// Per fault: time until writes through the majority side succeed
    /// again after it starts and after it heals ([`crate::recovery`]).
    pub recovery: crate::recovery::Recovery,
    /// Per healed fault: how long until every node agreed on a leader and
    /// applied the commit index of the heal ([`crate::lag`]).
    pub lag: crate::lag::Lag,
}

/// Counts ops by `f` and completion type.
pub fn stats(history: &[Event]) -> serde_json::Value {
    let mut m = std::collections::BTreeMap::<String, std::collections::BTreeMap<&str, u64>>::new();
    for e in history {
        if matches!(e.process, Process::Nemesis) {
            *m.entry("nemesis".into())
                .or_default()
                .entry("events")
                .or_default() += 1;
            continue;
        }
        let t = match e.kind {
            OpType::Invoke => continue,
            OpType::Ok => "ok",
            OpType::Fail => "fail",
            OpType::Info => "info",
        };
        *m.entry(e.f.clone()).or_default().entry(t).or_default() += 1;
    }
    serde_json::to_value(m).unwrap_or_default()
}

/// Writes `results.json` and `index.html` into `dir`.
///
/// # Errors
/// When a file cannot be written.
pub fn write(dir: &Path, results: &Results, history: &[Event]) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(results).context("encoding results")?;
    std::fs::write(dir.join("results.json"), text).context("writing results.json")?;
    std::fs::write(dir.join("index.html"), html(results, history)).context("writing index.html")?;
    Ok(())
}

/// The compact data the page draws: ops as [process, f, key, type, start,
/// end, offending, invoke index, value, error], nemesis events as [time, f,
/// value].
fn page_data(results: &Results, history: &[Event]) -> serde_json::Value {
    let offending: std::collections::BTreeSet<u64> = results
        .checkers
        .iter()
        .flat_map(|c| c.offending.iter().copied())
        .collect();
    let mut pending: std::collections::HashMap<u64, &Event> = Default::default();
    let mut ops = Vec::new();
    let mut nemesis = Vec::new();
    let end = history.last().map(|e| e.time).unwrap_or(0);
    for e in history {
        match e.process {
            Process::Nemesis => nemesis.push(json!([e.time, e.f, e.value])),
            Process::Client(p) => {
                if e.kind == OpType::Invoke {
                    pending.insert(p, e);
                } else if let Some(inv) = pending.remove(&p) {
                    let bad = offending.contains(&inv.index) || offending.contains(&e.index);
                    let t = match e.kind {
                        OpType::Ok => "ok",
                        OpType::Fail => "fail",
                        _ => "info",
                    };
                    ops.push(json!([
                        p, e.f, e.key, t, inv.time, e.time, bad, inv.index, e.value, e.error
                    ]));
                }
            }
        }
    }
    for (p, inv) in pending {
        ops.push(json!([
            p,
            inv.f,
            inv.key,
            "info",
            inv.time,
            end,
            offending.contains(&inv.index),
            inv.index,
            inv.value,
            "never completed"
        ]));
    }
    json!({"ops": ops, "nemesis": nemesis, "end": end})
}

/// Most rows listed per checker in the page's offending-events tables (all
/// of them are in `results.json` and outlined in the timeline).
const OFFENDING_ROWS: usize = 200;

/// One table per checker that named offending events: each event's history
/// index (anchor `ev-<index>`), time, process, type, f, key, value (with
/// the register op's `resource_version`, if any), node and error, so the violation can be read without hovering the timeline.
fn offending_sections(results: &Results, history: &[Event]) -> String {
    let by_index: std::collections::BTreeMap<u64, &Event> =
        history.iter().map(|e| (e.index, e)).collect();
    let mut out = String::new();
    for c in results.checkers.iter().filter(|c| !c.offending.is_empty()) {
        let name = escape(&c.checker);
        out.push_str(&format!(
            "<h2 id=\"offending-{name}\">Offending events: {name} ({})</h2>\n<table class=\"offending\"><tr><th>#</th><th>time</th><th>process</th><th>type</th><th>f</th><th>key</th><th>value</th><th>node</th><th>error</th></tr>\n",
            c.offending.len()
        ));
        for index in c.offending.iter().take(OFFENDING_ROWS) {
            let Some(e) = by_index.get(index) else {
                out.push_str(&format!(
                    "<tr id=\"ev-{index}\"><td>{index}</td><td colspan=8>not in the history</td></tr>\n"
                ));
                continue;
            };
            let process = match e.process {
                Process::Nemesis => "nemesis".to_string(),
                Process::Client(p) => p.to_string(),
            };
            let kind = match e.kind {
                OpType::Invoke => "invoke",
                OpType::Ok => "ok",
                OpType::Fail => "fail",
                OpType::Info => "info",
            };
            let mut value = e.value.to_string();
            if value.len() > 200 {
                let cut = (0..=200)
                    .rev()
                    .find(|i| value.is_char_boundary(*i))
                    .unwrap_or(0);
                value.truncate(cut);
                value.push('…');
            }
            if let Some(version) = e.resource_version {
                value.push_str(&format!(" @ resource_version {version}"));
            }
            out.push_str(&format!(
                "<tr id=\"ev-{index}\"><td>{index}</td><td>{:.3}s</td><td>{}</td><td>{kind}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>\n",
                e.time as f64 / 1e9,
                escape(&process),
                escape(&e.f),
                escape(e.key.as_deref().unwrap_or("")),
                escape(&value),
                escape(e.node.as_deref().unwrap_or("")),
                escape(e.error.as_deref().unwrap_or("")),
            ));
        }
        if c.offending.len() > OFFENDING_ROWS {
            out.push_str(&format!(
                "<tr><td colspan=9>… and {} more in results.json</td></tr>\n",
                c.offending.len() - OFFENDING_ROWS
            ));
        }
        out.push_str("</table>\n");
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn html(results: &Results, history: &[Event]) -> String {
    let data = page_data(results, history)
        .to_string()
        .replace("</", "<\\/");
    let mut rows = String::new();
    for c in &results.checkers {
        let (class, word) = match c.valid {
            Validity::Valid => ("ok", "valid"),
            Validity::Invalid => ("bad", "INVALID"),
            Validity::Unknown => ("unk", "unknown"),
        };
        let name = escape(&c.checker);
        let count = match c.offending.len() {
            0 => "0".to_string(),
            n => format!("<a href=\"#offending-{name}\">{n}</a>"),
        };
        rows.push_str(&format!(
            "<tr><td>{name}</td><td class=\"{class}\">{word}</td><td>{}</td><td>{count}</td></tr>",
            escape(&c.summary),
        ));
    }
    let offending = offending_sections(results, history);
    let recovery = escape(&results.recovery.table());
    let lag = escape(&results.lag.table());
    let run = escape(&serde_json::to_string_pretty(&results.run).unwrap_or_default());
    let verdict = if results.valid {
        "<span class=ok>VALID</span>"
    } else {
        "<span class=bad>INVALID</span>"
    };
    format!(
        r##"<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>openshell-jepsen run</title>
<style>
body{{font-family:sans-serif;margin:1em;}} table{{border-collapse:collapse}} td,th{{border:1px solid #ccc;padding:2px 6px}}
.ok{{color:#080;font-weight:bold}} .bad{{color:#c00;font-weight:bold}} .unk{{color:#a60;font-weight:bold}}
#tip{{position:fixed;background:#ffe;border:1px solid #999;padding:4px;font:12px monospace;display:none;pointer-events:none;white-space:pre}}
svg{{border:1px solid #ddd;background:#fff}}
table.offending tr{{background:#fee}} table.offending td{{font-size:12px}}
</style></head><body>
<h1>openshell-jepsen run: {verdict}</h1>
<table><tr><th>checker</th><th>result</th><th>summary</th><th>offending events</th></tr>{rows}</table>
<details><summary>run parameters</summary><pre>{run}</pre></details>
<h2>Write recovery per fault</h2>
<pre>{recovery}</pre>
<h2>Follower lag after each heal</h2>
<pre>{lag}</pre>
<p>Timeline: one lane per process; green ok, grey fail, orange info (unknown), red outline = offending. Shaded: nemesis windows (hover for the events). Files: <a href="history.jsonl">history.jsonl</a>, <a href="results.json">results.json</a>, node logs n*.log.</p>
<div id="timeline"></div>
<h2>Latency over time</h2>
<div id="latency"></div>
{offending}
<div id="tip"></div>
<script>
const D={data};
const NS="http://www.w3.org/2000/svg";
const tip=document.getElementById("tip");
function el(n,a,p){{const e=document.createElementNS(NS,n);for(const k in a)e.setAttribute(k,a[k]);if(p)p.appendChild(e);return e;}}
function hover(e,text){{e.addEventListener("mousemove",ev=>{{tip.style.display="block";tip.style.left=(ev.clientX+12)+"px";tip.style.top=(ev.clientY+12)+"px";tip.textContent=text;}});e.addEventListener("mouseleave",()=>tip.style.display="none");}}
const W=1400,L=60,end=Math.max(D.end,1);
const x=t=>L+(W-L-10)*t/end;
// Nemesis windows: a fault opens a window, healing events close it.
const opens=new Set(["cut","isolate","drop","kill","pause","clock-bump","clock-strobe","remove","island"]);
const closes=new Set(["recover","restart","resume","clock-reset","promote"]);
const windows=[];let open=0,start=0,texts=[];
for(const [t,f,v] of D.nemesis){{texts.push((t/1e9).toFixed(2)+"s "+f+" "+v);
 if(opens.has(f)){{if(open==0){{start=t;}}open++;}}
 else if(closes.has(f)&&open>0){{open--;if(open==0){{windows.push([start,t,texts.join("\n")]);texts=[];}}}}}}
if(open>0)windows.push([start,end,texts.join("\n")]);
function shade(svg,h){{for(const [a,b,txt] of windows){{const r=el("rect",{{x:x(a),y:0,width:Math.max(1,x(b)-x(a)),height:h,fill:"#f4c7c7",opacity:0.5}},svg);hover(r,txt);}}}}
function axis(svg,h){{for(let i=0;i<=10;i++){{const t=end*i/10;el("line",{{x1:x(t),x2:x(t),y1:0,y2:h,stroke:"#eee"}},svg);const tx=el("text",{{x:x(t),y:h-2,"font-size":10}},svg);tx.textContent=(t/1e9).toFixed(1)+"s";}}}}
const procs=[...new Set(D.ops.map(o=>o[0]))].sort((a,b)=>a-b);
const lane=new Map(procs.map((p,i)=>[p,i]));
const LH=Math.max(3,Math.min(14,600/Math.max(procs.length,1)));
const H=procs.length*LH+20;
const svg=el("svg",{{width:W,height:H}},document.getElementById("timeline"));
axis(svg,H);shade(svg,H);
const col={{ok:"#3a3",fail:"#aaa",info:"#e90"}};
for(const o of D.ops){{const [p,f,k,t,a,b,bad,idx,v,err]=o;const y=lane.get(p)*LH;
 const r=el("rect",{{x:x(a),y:y+1,width:Math.max(1.5,x(b)-x(a)),height:LH-2,fill:col[t],stroke:bad?"#d00":"none","stroke-width":bad?2:0}},svg);
 hover(r,"process "+p+" "+f+" "+k+" "+t+" value="+JSON.stringify(v)+"\n#"+idx+" "+(a/1e9).toFixed(3)+"s +"+((b-a)/1e6).toFixed(1)+"ms"+(err?"\n"+err:""));}}
for(const o of D.ops.filter(o=>o[6])){{const y=lane.get(o[0])*LH;el("circle",{{cx:x(o[4]),cy:y+LH/2,r:4,fill:"#d00"}},svg);}}
for(const [p,i] of lane){{if(procs.length<=60){{const tx=el("text",{{x:2,y:i*LH+LH-2,"font-size":Math.min(10,LH)}},svg);tx.textContent="p"+p;}}}}
const LHt=300;const svg2=el("svg",{{width:W,height:LHt+20}},document.getElementById("latency"));
const maxLat=Math.max(1,...D.ops.map(o=>o[5]-o[4]));
const ly=l=>LHt-(LHt-10)*Math.log10(1+l/1e6)/Math.log10(1+maxLat/1e6);
axis(svg2,LHt+20);shade(svg2,LHt);
for(const ms of [1,10,100,1000,10000]){{if(ms*1e6<=maxLat){{el("line",{{x1:L,x2:W,y1:ly(ms*1e6),y2:ly(ms*1e6),stroke:"#ddd"}},svg2);const tx=el("text",{{x:2,y:ly(ms*1e6),"font-size":10}},svg2);tx.textContent=ms+" ms";}}}}
const fcol={{read:"#36c",write:"#3a3",cas:"#a3a"}};
for(const o of D.ops){{const c=el("circle",{{cx:x(o[4]),cy:ly(o[5]-o[4]),r:o[6]?4:1.8,fill:o[6]?"#d00":(o[3]=="ok"?(fcol[o[1]]||"#333"):col[o[3]])}},svg2);
 hover(c,o[1]+" "+o[2]+" "+o[3]+" "+((o[5]-o[4])/1e6).toFixed(1)+"ms");}}
</script></body></html>
"##
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(index: u64, kind: OpType, f: &str, value: serde_json::Value, time: u64) -> Event {
        Event {
            index,
            kind,
            process: Process::Client(7),
            f: f.into(),
            key: Some("k1".into()),
            value,
            time,
            node: Some("n2".into()),
            error: None,
            resource_version: None,
        }
    }

    fn results(offending: Vec<u64>) -> Results {
        let invalid = !offending.is_empty();
        Results {
            valid: !invalid,
            run: json!({}),
            checkers: vec![CheckResult {
                checker: "linearizable".into(),
                valid: if invalid {
                    Validity::Invalid
                } else {
                    Validity::Valid
                },
                summary: "test".into(),
                offending,
                details: json!(null),
            }],
            stats: json!({}),
            recovery: crate::recovery::Recovery::default(),
            lag: crate::lag::Lag::default(),
        }
    }

    /// A two-operation history: write 1 (ok), then a read that saw 0.
    fn history() -> Vec<Event> {
        vec![
            event(0, OpType::Invoke, "write", json!(1), 1_000),
            event(1, OpType::Ok, "write", json!(1), 2_000),
            event(2, OpType::Invoke, "read", json!(null), 3_000),
            event(3, OpType::Ok, "read", json!(0), 4_000),
        ]
    }

    #[test]
    fn offending_operations_are_listed_and_outlined() {
        let history = history();
        let page = html(&results(vec![2, 3, 99]), &history);
        assert!(page.contains("<h1>openshell-jepsen run: <span class=bad>INVALID</span>"));
        // The checkers table links its count to the listing.
        assert!(page.contains("<a href=\"#offending-linearizable\">3</a>"));
        assert!(page.contains("<h2 id=\"offending-linearizable\">"));
        // The stale read's invoke and completion rows, with their values.
        assert!(page.contains("<tr id=\"ev-2\"><td>2</td>"));
        assert!(page.contains("<tr id=\"ev-3\"><td>3</td><td>0.000s</td><td>7</td><td>ok</td><td>read</td><td>k1</td><td><code>0</code></td><td>n2</td>"));
        assert!(page.contains("<tr id=\"ev-99\"><td>99</td><td colspan=8>not in the history</td>"));
        assert!(!page.contains("id=\"ev-1\""), "a valid op is not listed");
        // The timeline's data outlines the read, not the write.
        let data = page_data(&results(vec![2, 3]), &history);
        let ops = data["ops"].as_array().cloned().unwrap_or_default();
        let bad: Vec<(String, bool)> = ops
            .iter()
            .map(|o| (o[1].as_str().unwrap_or("").to_string(), o[6] == json!(true)))
            .collect();
        assert_eq!(bad, [("write".into(), false), ("read".into(), true)]);
    }

    #[test]
    fn a_valid_run_lists_nothing_and_values_are_escaped() {
        let mut history = history();
        history[3].value = json!("<script>x</script>");
        let page = html(&results(vec![]), &history);
        assert!(page.contains("<span class=ok>VALID</span>"));
        assert!(!page.contains("Offending events"));
        let page = html(&results(vec![3]), &history);
        assert!(page.contains("&lt;script&gt;x&lt;/script&gt;"));
        assert!(!page.contains("<script>x</script>"));
    }
}
