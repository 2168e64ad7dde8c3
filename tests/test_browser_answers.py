"""Never lose an answer, in a real browser (Playwright driving Debian's chromium).

The network is cut by a `Network` switch on the context's route (answer POSTs aborted or refused,
the page itself still loads), then restored: every answer must reach the store, the page must show what is unsaved meanwhile, a
reload must keep and send unsaved answers, a rejected answer must bring the page back to it,
a finished queue must stay finished, and a cross-site sign-in POST must be refused.
"""
from __future__ import annotations

import pytest
import torch

from browser_network import Network
from test_browser_app import CHROMIUM, browser, settle, start_server, signed_in as page_signed_in  # noqa: F401 - `browser` is a fixture

torch.set_num_threads(1)
PEOPLE = {f"ann{k}": ("annotator", f"answers-token-{k}") for k in range(1, 6)}
N = 5  # candidates in the queue

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium at /usr/bin/chromium"),
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    from blindspots.app import create_app
    from blindspots.app.services import make_sample_project

    root = tmp_path_factory.mktemp("answers")
    project = make_sample_project(root / "sample", n_pool=12, size=32, n_candidates=N, annotators=PEOPLE,
                                  vote_set=False)
    with start_server(create_app(project.path)) as url:
        yield {"url": url, "project": project}


def signed_in(browser, url: str, who: str):  # noqa: ANN001, ANN201
    """A fresh context (own localStorage) signed in as `who`, on the rate page, queue loaded; its `Network`
    switch is `page.net`."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    net = Network()
    ctx.route(f"{url}/api/**", net)
    page, errors = page_signed_in(ctx, url, PEOPLE[who][1])
    page.net = net
    page.wait_for_selector("body[data-ready='1']", state="attached")
    return ctx, page, errors


def stored(served: dict, who: str) -> dict:
    r = served["project"].answers.ratings_for_round(0)
    r = r[r["annotator"] == who]
    return {i: ("ood" if o else int(s)) for i, s, o in r[["id", "score", "out_of_domain"]].itertuples(index=False)}


def ids(served: dict) -> list[str]:
    return [x["id"] for x in served["project"].answers.candidates(0, "M").to_dict("records")]


def test_network_cut_mid_session_loses_nothing(served: dict, browser) -> None:  # noqa: ANN001
    url, order = served["url"], ids(served)
    ctx, page, errors = signed_in(browser, url, "ann1")
    page.keyboard.press("3")
    settle(page)
    assert stored(served, "ann1") == {order[0]: 3}

    page.net.set("cut", r"/api/ratings")
    for key in ["4", "o", "2"]:
        page.keyboard.press(key)
    page.wait_for_selector("body[data-unsent='3']", state="attached")
    page.wait_for_selector("#outbox:not([hidden])")  # the persistent banner
    assert "3 answers are not saved yet" in page.text_content("#outbox")
    assert page.text_content("[data-unsent-count]") == "3 unsaved"
    assert page.text_content("#progress") == "4 / 5"  # the page went on
    assert stored(served, "ann1") == {order[0]: 3}  # nothing reached the server

    page.net.set(None)
    page.click("#outbox button")  # "Retry now" (the backoff would get there too)
    settle(page)
    assert page.is_hidden("#outbox")
    assert stored(served, "ann1") == {order[0]: 3, order[1]: 4, order[2]: "ood", order[3]: 2}
    assert errors == []
    ctx.close()


def test_reload_keeps_and_sends_unsaved_answers(served: dict, browser) -> None:  # noqa: ANN001
    url, order = served["url"], ids(served)
    ctx, page, errors = signed_in(browser, url, "ann2")
    page.net.set("cut", r"/api/ratings")
    page.keyboard.press("5")
    page.keyboard.press("1")
    page.wait_for_selector("body[data-unsent='2']", state="attached")
    page.reload()  # still offline for answers
    page.wait_for_selector("body[data-ready='1']", state="attached")
    page.wait_for_selector("body[data-unsent='2']", state="attached")
    assert page.text_content("#progress") == "2 / 5"  # the unsent answers are still answers
    assert page.text_content("#image-id").startswith("#3 ")
    assert stored(served, "ann2") == {}

    page.net.set(None)
    page.reload()  # back online: the replayed outbox sends them
    page.wait_for_selector("body[data-ready='1']", state="attached")
    settle(page)
    assert stored(served, "ann2") == {order[0]: 5, order[1]: 1}
    assert page.get_attribute("body", "data-unsent") == "0"
    assert errors == []
    ctx.close()


def test_rejected_answer_brings_the_page_back(served: dict, browser) -> None:  # noqa: ANN001
    url, order = served["url"], ids(served)
    ctx, page, _ = signed_in(browser, url, "ann3")

    page.net.refusal = (409, '{"detail": "round: expected the round now taking ratings (1), got 0"}')
    page.net.set("refuse", r"/api/ratings$")
    page.keyboard.press("4")
    settle(page)
    assert page.is_visible("#answer-error")
    assert "NOT saved" in page.text_content("#answer-error") and "409" in page.text_content("#answer-error")
    assert page.text_content("#image-id") == f"#1 {order[0]}"  # back on the rejected image, unrated
    assert page.text_content("#progress") == "0 / 5"
    page.net.set(None)
    page.keyboard.press("4")
    settle(page)
    assert page.is_hidden("#answer-error")
    assert stored(served, "ann3") == {order[0]: 4}
    ctx.close()


def test_finished_queue_stays_finished(served: dict, browser) -> None:  # noqa: ANN001
    url, order = served["url"], ids(served)
    ctx, page, errors = signed_in(browser, url, "ann4")
    for key in ["1", "2", "3", "4", "5"]:
        page.keyboard.press(key)
    settle(page)
    page.wait_for_selector("body[data-finished='1']", state="attached")
    assert page.is_visible("#finished") and page.is_hidden("#rate-view")
    assert "All 5 images" in page.text_content("#finished") and "Every answer is saved" in page.text_content("#finished")
    before = stored(served, "ann4")
    assert before == dict(zip(order, [1, 2, 3, 4, 5]))
    for key in ["5", "o", "ArrowLeft", "ArrowRight", "3"]:  # no key reopens the queue or changes an answer
        page.keyboard.press(key)
    settle(page)
    assert page.is_visible("#finished") and stored(served, "ann4") == before
    page.reload()
    page.wait_for_selector("body[data-ready='1']", state="attached")
    assert page.is_visible("#finished")  # not reopened at #1

    # Changing an answer is explicit: pick it from the list, then rate.
    page.click("#history summary")
    page.click("#history-list li:nth-child(2) button")
    assert page.text_content("#image-id") == f"#2 {order[1]}"
    assert "your answer: 2" in page.text_content("#changing")
    page.keyboard.press("5")
    settle(page)
    assert page.is_visible("#finished")
    assert stored(served, "ann4") == {**before, order[1]: 5}
    assert errors == []
    ctx.close()


def test_review_verdicts_survive_a_network_cut(served: dict, browser) -> None:  # noqa: ANN001
    """The review page uses the same outbox; its progress counts regions, so partial images count."""
    url, p = served["url"], served["project"]
    ctx, page, errors = signed_in(browser, url, "ann5")
    page.net.set("cut", r"/api/reviews$")  # GETs (the queue, the images) still load
    page.goto(f"{url}/review")
    page.wait_for_selector("body[data-ready='1']", state="attached")
    total = int(page.text_content("#progress").split(" / ")[1])
    image_id = page.text_content("#image-id").split(" · ")[1]
    first = page.get_attribute("#regions tr.selected", "data-region")
    page.keyboard.press("f")
    page.wait_for_selector("body[data-unsent='1']", state="attached")
    assert page.text_content("#progress") == f"1 / {total}"  # one region of a partly judged image
    row = page.text_content("#regions tr[data-region='%s']" % first)
    assert "not saved yet" in row, (row, p.answers.reviews().query("annotator == 'ann5'").to_dict("records"))
    page.reload()
    page.wait_for_selector("body[data-ready='1']", state="attached")
    assert page.get_attribute("body", "data-unsent") == "1" and page.text_content("#progress") == f"1 / {total}"
    assert len(p.answers.reviews().query("annotator == 'ann5'")) == 0
    page.net.set(None)
    if page.is_visible("#outbox"):
        page.click("#outbox button")  # or the backoff's next try
    settle(page)
    rv = p.answers.reviews().query("annotator == 'ann5'")
    assert rv[["id", "region_id", "verdict"]].values.tolist() == [[f"s0/{image_id}", first, "fine"]]
    assert errors == []
    ctx.close()


def test_cross_site_sign_in_is_refused(served: dict, browser) -> None:  # noqa: ANN001
    """Login CSRF: another site's auto-submitting form posts the attacker's token to /signin."""
    url = served["url"]
    ctx, page, _ = signed_in(browser, url, "ann5")  # the victim
    evil = "http://attacker.example"
    form = (f'<form id="f" method="post" action="{url}/signin"><input name="token" value="{PEOPLE["ann1"][1]}">'
            '</form><script>document.getElementById("f").submit()</script>')
    page.route(f"{evil}/**", lambda route: route.fulfill(status=200, content_type="text/html", body=form))
    with page.expect_response(f"{url}/signin") as resp:
        page.goto(f"{evil}/page")
    assert resp.value.status == 403
    page.goto(f"{url}/rate")
    page.wait_for_selector("body[data-ready='1']", state="attached")
    assert "ann5" in page.text_content(".who")  # still the victim's own session
    ctx.close()


def test_api_docs_render_offline(served: dict, browser) -> None:  # noqa: ANN001
    from blindspots.app.docs import swagger_assets

    if swagger_assets() is None:
        pytest.skip("swagger-ui-bundle-v2 is not installed (no docs pages then)")
    ctx = browser.new_context()
    page = ctx.new_page()
    offline = []
    page.on("request", lambda r: offline.append(r.url) if not r.url.startswith(served["url"]) else None)
    page.goto(f"{served['url']}/api/docs")
    page.wait_for_selector(".swagger-ui .info .title", timeout=20000)
    assert "blindspots" in page.text_content(".swagger-ui .info .title")
    assert offline == []  # no CDN
    ctx.close()
