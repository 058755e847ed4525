"""The sweep page in the system Chromium: the trials table, the parallel-coordinates chart and a
scatter per setting from the API, the best trial's checkpoint link, and the table following a
trial that ends while the page is open."""
from __future__ import annotations

import pytest

from tests.webapp.runs_helpers import make_checkpoint, make_data, make_run
from webapp.runs.models import RunStatus
from webapp.sweeps.models import Sweep, Trial

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SPACE = [{"name": "lr", "low": 1e-4, "high": 1e-2, "log": True}, {"name": "batch_size", "values": [4, 8]}]


@pytest.fixture
def sweep(alice):
    corpus, tokenizer = make_data(alice)
    sweep = Sweep.objects.create(owner=alice, name="lr and batch", kind="pretrain", base={}, space=SPACE,
                                 metric="loss", sampler="tpe", n_trials=4, parallelism=2)
    done = [(1e-4, 4, 5.0), (1e-3, 8, 3.5), (3e-3, 4, 4.0)]
    for number, (lr, batch, loss) in enumerate(done):
        run = make_run(alice, corpus=corpus, tokenizer=tokenizer, name=f"trial {number}", status=RunStatus.SUCCEEDED,
                       current_step=20)
        trial = Trial.objects.create(sweep=sweep, number=number, run=run, params={"lr": lr, "batch_size": batch},
                                     state="complete", value=loss, intermediate={"10": loss + 1, "20": loss})
        if number == 1:
            make_checkpoint(run, step=20)
            sweep.best_trial = trial
    sweep.save()
    running = make_run(alice, corpus=corpus, tokenizer=tokenizer, name="trial 3", status=RunStatus.RUNNING)
    Trial.objects.create(sweep=sweep, number=3, run=running, params={"lr": 5e-3, "batch_size": 8},
                         intermediate={"10": 4.8})
    return sweep


def test_the_sweep_page_lists_trials_draws_both_charts_and_follows_a_trial(sweep, alice_cookie, live_server_page,
                                                                          shots):
    page = live_server_page
    page.context.add_cookies([alice_cookie])
    page.goto(f"/sweeps/{sweep.id}/")
    page.wait_for_function("() => document.querySelector('#sweep-parcoords .main-svg') !== null")
    rows = page.locator("#trials-table tbody tr")
    assert rows.count() == 4
    assert page.locator('#trials-table tr[data-trial="1"]').get_attribute("class") == "best"
    assert "(4.8)" in page.locator('#trials-table tr[data-trial="3"]').inner_text()  # its latest validation
    parcoords = page.evaluate("""() => { const d = document.getElementById('sweep-parcoords').data[0];
        return { type: d.type, labels: d.dimensions.map(x => x.label), metric: Array.from(d.dimensions[2].values) }; }""")
    assert parcoords == {"type": "parcoords", "labels": ["lr (log)", "batch_size", "loss"], "metric": [5.0, 3.5, 4.0]}
    scatter = page.evaluate("""() => { const el = document.getElementById('sweep-scatter');
        return { names: el.data.map(t => t.name), x0: Array.from(el.data[0].x), xtype: el.layout.xaxis.type }; }""")
    assert scatter == {"names": ["lr", "batch_size"], "x0": [1e-4, 1e-3, 3e-3], "xtype": "log"}
    link = page.locator("#best-explore")
    ckpt = sweep.best_trial.run.checkpoints.get()
    assert link.get_attribute("href").endswith(f"?checkpoint={ckpt.id}")
    page.screenshot(path=str(shots / "sweep.png"), full_page=True)

    # The running trial ends: the page shows it without a reload, and the charts gain a point.
    Trial.objects.filter(sweep=sweep, number=3).update(state="complete", value=3.0)
    Sweep.objects.filter(pk=sweep.pk).update(best_trial=Trial.objects.get(sweep=sweep, number=3))
    page.wait_for_function("""() => document.querySelector('#trials-table tr[data-trial="3"] [data-role=state]')
        .textContent === 'Complete'""", timeout=20_000)
    assert page.locator('#trials-table tr[data-trial="3"]').get_attribute("class") == "best"
    assert page.evaluate("() => document.getElementById('sweep-parcoords').data[0].dimensions[2].values.length") == 4
    assert "Best: trial 3" in page.locator("#sweep-best").inner_text()
    assert page.locator("#best-explore").count() == 0  # trial 3's run has no checkpoint yet
