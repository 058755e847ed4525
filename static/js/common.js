// Helpers every page script shares, under one global: window.Workbench.
//   Workbench.el(tag, className, text)   a new element with an optional class and text
//   Workbench.postJSON(url, body, opts)  POST body as JSON with the CSRF header; resolves to the
//                                         JSON answer, rejects with an Error whose message is a
//                                         sentence a person can read (the API's own "error" when
//                                         it sent one). opts.signal aborts it (AbortError as is).
//   Workbench.chartHead(title)           a Plotly layout's title, legend and margins: the title
//                                         at the top, the legend under the plot, so that it never
//                                         covers the title
// base.html loads this file before the page scripts (all deferred, so they run in order).
(function () {
  "use strict";

  const UNREACHABLE = "Could not reach the server. Check your connection and try again.";

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  // Django's token: the csrftoken cookie, else a {% csrf_token %} field on the page (the cookie
  // is absent when CSRF_USE_SESSIONS or CSRF_COOKIE_HTTPONLY is set).
  function csrfToken() {
    for (const part of document.cookie ? document.cookie.split(";") : []) {
      const [name, ...rest] = part.trim().split("=");
      if (name === "csrftoken") return decodeURIComponent(rest.join("="));
    }
    const field = document.querySelector("input[name=csrfmiddlewaretoken]");
    return field ? field.value : "";
  }

  // The API answers every failure with {"error": "<a sentence>"}; anything else (a proxy's HTML
  // page, an empty body) still gives the person a sentence with the HTTP status.
  function failure(status, data) {
    const message = data && typeof data.error === "string" && data.error.trim()
      ? data.error.trim()
      : status >= 500
        ? `The server could not answer (HTTP ${status}). Try again in a moment.`
        : `The request was refused (HTTP ${status}).`;
    const error = new Error(/[.!?]$/.test(message) ? message : message + ".");
    error.status = status;
    error.data = data;
    return error;
  }

  async function postJSON(url, body, opts = {}) {
    let response;
    try {
      response = await fetch(url, {
        method: "POST",
        credentials: "same-origin",
        signal: opts.signal,
        headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrfToken() },
        body: JSON.stringify(body === undefined ? {} : body),
      });
    } catch (e) {
      if (e && e.name === "AbortError") throw e;
      throw new Error(UNREACHABLE);
    }
    let data = null;
    try {
      data = await response.json();
    } catch (e) {
      if (e && e.name === "AbortError") throw e;
      if (response.ok) throw new Error("The server sent an answer that could not be read. Try again in a moment.");
    }
    if (!response.ok) throw failure(response.status, data);
    return data;
  }

  // A chart's title at the top left and its legend under the plot, past the x axis's title, where
  // it may take as many rows as its names need (Plotly widens the bottom margin for them). A legend
  // beside or under the title ran over it once its names were long or wrapped (issue 21).
  function chartHead(title) {
    return {
      title: { text: title, font: { size: 14 }, x: 0.02, xanchor: "left", y: 1, yref: "container",
               yanchor: "top", pad: { t: 10 } },
      legend: { orientation: "h", x: 0, xanchor: "left", y: -0.3, yanchor: "top" },
      margin: { t: 40, b: 72 },
    };
  }

  // The explorer's table of its tools, which its view draws from their registry (webapp.explorer.tools):
  // {tool name: {url: its JSON endpoint, compare: its task in /api/explore/compare/ or null}}; {} on a
  // page without it. The explorer's scripts take every endpoint from here.
  let toolTable = null;
  function explorerTools() {
    if (toolTable === null) {
      const node = document.getElementById("explorer-tools");
      toolTable = node ? JSON.parse(node.textContent) : {};
    }
    return toolTable;
  }

  window.Workbench = Object.freeze({ el, postJSON, csrfToken, chartHead, explorerTools, UNREACHABLE });
})();
