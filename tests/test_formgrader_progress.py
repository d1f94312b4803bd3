"""Issue 52 §5: formgrader's long clicks (Autograde: 9-19 s a submission on the hub) say what they are doing.

``coursetools.formgrader_progress`` puts a script on every formgrader page; a click in the Autograde column (or
Collect, Generate Feedback...) then turns the row's "Please wait..." into what the click does and for how long,
until formgrader redraws the row. Here on a page that behaves as formgrader's does; tests/test_hub.py sees it in
the instructor's real formgrader.
"""

from __future__ import annotations

import jinja2
from browser_driver import offline_page, requires_browser

from coursetools.formgrader_progress import SAYS, SCRIPT, wrap

# One row of formgrader's submissions table: a click on the lightning icon empties the row and writes "Please
# wait..." into its first cell, and the answer, 2.5 s later, redraws the row (as nbgrader's manage_submissions.js).
PAGE = """<html><body><table><tr>
<td class="student-name">alice</td><td class="autograde"><a href="#" id="go">autograde</a></td>
</tr></table>
<script>
document.getElementById("go").addEventListener("click", function (event) {
  event.preventDefault();
  var name = document.querySelector("td.student-name");
  name.textContent = "Please wait...";
  setTimeout(function () { name.textContent = "alice"; }, 2500);
});
</script>
</body></html>"""


def test_every_formgrader_page_carries_the_script_once():
    environment = jinja2.Environment(loader=jinja2.DictLoader({"page.tpl": "<html><body>{{ x }}</body></html>"}))
    wrap(environment)
    wrap(environment)  # loaded twice: still one script
    page = environment.get_template("page.tpl").render(x="hi")
    assert page.count("coursetools/formgrader_progress.py") == 1 and page.endswith(SCRIPT + "</body></html>")


@requires_browser
def test_a_long_click_says_what_it_does_and_for_how_long_until_the_row_is_redrawn():
    environment = jinja2.Environment(loader=jinja2.DictLoader({"page.tpl": PAGE}))
    wrap(environment)
    with offline_page() as browsing:
        page = browsing.page
        page.set_content(environment.get_template("page.tpl").render())
        page.click("#go")
        cell = page.locator("td.student-name")
        page.wait_for_function("() => document.querySelector('td.student-name').textContent.startsWith('Please wait:')")
        said = cell.text_content()
        assert said.startswith(f"Please wait: {SAYS['autograde']} (") and said.endswith(" s)"), said
        page.wait_for_function(
            "() => document.querySelector('td.student-name').textContent === 'alice'", timeout=10_000
        )
        page.wait_for_timeout(1500)
        assert cell.text_content() == "alice"  # formgrader's redraw stands: the script stopped
        assert browsing.page_errors == []
