// Sortable tables: in a table.sortable, clicking a heading with data-sort="number" or "text"
// sorts the body's rows by that column's cells (their data-value, else their text); clicking
// again reverses the order. Empty cells always go last.
(function () {
  "use strict";
  for (const table of document.querySelectorAll("table.sortable")) {
    const headings = Array.from(table.tHead.rows[0].cells);
    headings.forEach((th, column) => {
      const kind = th.dataset.sort;
      if (!kind) return;
      th.classList.add("sortable-heading");
      th.tabIndex = 0;
      th.title = "Sort by this column";
      const sort = () => {
        const descending = th.getAttribute("aria-sort") !== "descending";
        headings.forEach((h) => h.removeAttribute("aria-sort"));
        th.setAttribute("aria-sort", descending ? "descending" : "ascending");
        const body = table.tBodies[0];
        const key = (row) => {
          const cell = row.cells[column];
          const raw = cell.dataset.value !== undefined ? cell.dataset.value : cell.textContent.trim();
          if (raw === "" || raw === "None") return null;
          return kind === "number" ? Number(raw) : raw.toLowerCase();
        };
        const rows = Array.from(body.rows).map((row) => [key(row), row]);
        rows.sort(([a], [b]) => {
          if (a === null || b === null) return (a === null) - (b === null);
          const order = kind === "number" && !Number.isNaN(a) && !Number.isNaN(b) ? a - b : String(a).localeCompare(String(b));
          return descending ? -order : order;
        });
        for (const [, row] of rows) body.appendChild(row);
      };
      th.addEventListener("click", sort);
      th.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sort(); } });
    });
  }
}());
