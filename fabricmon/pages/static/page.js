// fabricmon pages: refresh the live part in place, keep the operator's selection and the
// expanded groups across refreshes (and in the URL's #fragment, so a link can point at a
// switch), show the details of what was clicked. No external code; served by the daemon.
(function () {
  "use strict";
  var body = document.body, live = document.getElementById("live");
  var panel = document.getElementById("details"), panelBody = document.getElementById("details-body");
  var every = parseInt(body.getAttribute("data-refresh"), 10) || 5000;
  var KINDS = ["switch", "link", "bundle", "port", "source"];
  var state = readHash();

  function readHash() {
    var p = new URLSearchParams(location.hash.replace(/^#/, ""));
    var ex = (p.get("expand") || "").split(",").filter(Boolean);
    return {expand: ex, select: p.get("select") || ""};
  }
  function writeHash() {
    var p = new URLSearchParams();
    if (state.expand.length) p.set("expand", state.expand.join(","));
    if (state.select) p.set("select", state.select);
    var h = p.toString();
    history.replaceState(null, "", h ? "#" + h : location.pathname + location.search);
  }
  function keyOf(el) {
    for (var i = 0; i < KINDS.length; i++) {
      var v = el.getAttribute("data-" + KINDS[i]);
      if (v !== null && (KINDS[i] !== "switch" || el.hasAttribute("data-guid")))
        return KINDS[i] + ":" + (KINDS[i] === "switch" ? el.getAttribute("data-guid") : v);
    }
    return "";
  }
  function find(key) {
    var i = key.indexOf(":"), kind = key.slice(0, i), v = key.slice(i + 1);
    var attr = kind === "switch" ? "data-guid" : "data-" + kind;
    var all = live.querySelectorAll("[" + attr + "]");
    for (var j = 0; j < all.length; j++) if (all[j].getAttribute(attr) === v) return all[j];
    return null;
  }
  function tipOf(el) {
    var t = el.querySelector(":scope > title");
    return t ? t.textContent : (el.getAttribute("data-tip") || "");
  }
  function show(el) {
    var old = live.querySelectorAll(".selected");
    for (var i = 0; i < old.length; i++) old[i].classList.remove("selected");
    if (!el) { panel.hidden = true; panelBody.removeAttribute("data-key"); return; }
    el.classList.add("selected");
    var key = keyOf(el), same = panelBody.getAttribute("data-key") === key;
    var pre = document.createElement("pre");
    pre.textContent = tipOf(el);
    if (same && panelBody.firstChild) {
      panelBody.replaceChild(pre, panelBody.firstChild);     // the same selection, refreshed: no flicker
    } else {
      panelBody.textContent = "";
      panelBody.appendChild(pre);
    }
    panelBody.setAttribute("data-key", key);
    var url = el.getAttribute("data-detail");
    if (url) {
      fetch(url, {cache: "no-store"}).then(function (r) { return r.ok ? r.text() : ""; }).then(function (html) {
        if (state.select !== key || !html) return;
        var div = document.createElement("div");
        div.className = "detail";
        div.innerHTML = html;          // the daemon's own escaped HTML
        var prev = panelBody.querySelector(".detail");
        if (prev) panelBody.replaceChild(div, prev); else panelBody.appendChild(div);
      }).catch(function () {});
    }
    panel.hidden = false;
  }
  function reselect() {
    var el = state.select ? find(state.select) : null;
    if (state.select && !el) state.select = "";
    show(el);
  }
  var shown = "";          // the snapshot and expanded groups the live part shows
  function refresh() {
    var ex = state.expand.join(",");
    var job = new URLSearchParams(location.search).get("job");      // a job's footprint (/?job=<id>)
    var q = "/?part=live" + (ex ? "&expand=" + encodeURIComponent(ex) : "") + (job ? "&job=" + encodeURIComponent(job) : "");
    return fetch(q, {cache: "no-store"}).then(function (r) {
      if (!r.ok) throw new Error(r.status);
      var snap = r.headers.get("X-Fabricmon-Snapshot") || "";
      return r.text().then(function (html) {
        body.setAttribute("data-refreshes", String((parseInt(body.getAttribute("data-refreshes"), 10) || 0) + 1));
        var wasStale = body.classList.contains("stale");
        body.classList.remove("stale");
        if (!wasStale && snap + "|" + ex === shown) return;    // nothing new: leave the page (and tooltips) alone
        shown = snap + "|" + ex;
        var map = live.querySelector(".map"), sx = map ? map.scrollLeft : 0;
        live.innerHTML = html;
        map = live.querySelector(".map");
        if (map) map.scrollLeft = sx;
        body.setAttribute("data-snapshot", snap);
        var meta = document.getElementById("meta");
        if (meta) {
          document.getElementById("updated").textContent = "snapshot " + meta.getAttribute("data-when");
          document.getElementById("overall").className = "dot " + meta.getAttribute("data-state");
        }
        reselect();
      });
    }).catch(function () {
      body.classList.add("stale");
      document.getElementById("updated").textContent = "daemon unreachable: showing the last snapshot";
    });
  }
  live.addEventListener("click", function (ev) {
    var g = ev.target.closest("[data-toggle]");
    if (g) {
      var id = g.getAttribute("data-toggle"), i = state.expand.indexOf(id);
      if (i < 0) state.expand.push(id); else state.expand.splice(i, 1);
      writeHash();
      refresh();
      return;
    }
    var el = ev.target.closest("[data-link],[data-bundle],[data-port],[data-source],[data-switch][data-guid]");
    state.select = el ? keyOf(el) : "";
    writeHash();
    show(el);
  });
  document.getElementById("close").addEventListener("click", function () {
    state.select = ""; writeHash(); show(null);
  });
  document.addEventListener("keydown", function (ev) {
    if (ev.key === "Escape") { state.select = ""; writeHash(); show(null); }
  });
  window.addEventListener("hashchange", function () { state = readHash(); refresh(); });
  shown = body.getAttribute("data-snapshot") + "|";
  // First paint: the server drew no group expanded; draw what the URL asks for.
  (state.expand.length ? refresh() : Promise.resolve()).then(reselect);
  setInterval(refresh, every);
})();
