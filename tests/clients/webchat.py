"""The web chat in a real browser: Debian's headless Chromium through Debian's chromedriver
(Selenium never fetches a driver), against a `toolhost serve --http` whose model is scripted.

Run by `web_page::the_page_shows_tool_calls_approvals_and_the_live_catalog_in_a_real_browser`:

    webchat.py --url http://127.0.0.1:PORT/ --ensembles DIR --pending DIR --screenshot OUT.png

The host serves `calculate` and a destructive `say`; its model answers, in order: a call c1 of
calculate (40 + 2), a call c2 of calculate (2 * 21), "Both are 42.", a call a1 of say
("hello from say"), "Said it.", a call d1 of say ("second"), "Not allowed.", a call p1 of
ask_person (a tool that asks the person's name, granted elicitation), "Hello, Grace.", "Summary
sent." (to a conversation started from the prompt `brief` with the resource docs://brief.md
attached). PENDING holds
extra.toml (an ensemble with a tool `sleep`) and broken.toml (an invalid ensemble), which the
catalog step moves into ENSEMBLES.

Prints one line per step passed and a `timing: {...}` line (the page's paint times); exits 1
with the reason on the first failure.
"""

import argparse
import json
import os
import sys
import tempfile

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

WAIT = 20


def fail(message):
    print(f"FAIL: {message}", flush=True)
    sys.exit(1)


def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in [
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", "--window-size=1280,900",
        f"--user-data-dir={tempfile.mkdtemp(prefix='webchat-')}",
    ]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def wait(driver, what, condition):
    # An element found on a page that is being replaced goes stale between finding it and
    # asking about it (a sign-out reloads the page): that is "not yet", not a failure.
    waiting = WebDriverWait(driver, WAIT, ignored_exceptions=(StaleElementReferenceException,))
    try:
        return waiting.until(lambda d: condition(d))
    except TimeoutException:
        fail(f"waited {WAIT} s for {what}; the page at {driver.current_url} shows:\n"
             f"{driver.find_element(By.TAG_NAME, 'body').text}")
    except Exception as e:
        fail(f"while waiting for {what}: {e!r}; the page at {driver.current_url} shows:\n"
             f"{driver.find_element(By.TAG_NAME, 'body').text}")


def testid(driver, name):
    return driver.find_elements(By.CSS_SELECTOR, f'[data-testid="{name}"]')


def send(driver, text):
    composer = testid(driver, "composer")[0]
    composer.click()
    composer.send_keys(text)
    composer.send_keys(Keys.ENTER)  # Enter sends
    wait(driver, "the run to start", lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-running") == "true"
         or testid(d, "tool-call"))


def idle(driver, what):
    wait(driver, what, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-running") == "false")


def call(driver, call_id):
    return wait(driver, f"the tool call {call_id}",
                lambda d: d.find_elements(By.CSS_SELECTOR, f'[data-testid="tool-call"][data-call-id="{call_id}"]'))[0]


def status_of(driver, call_id, *statuses):
    return wait(driver, f"{call_id} to end as {' or '.join(statuses)}",
                lambda d: call(d, call_id).get_attribute("data-status") in statuses and call(d, call_id))


def text_after(driver, text, block):
    """True when an assistant bubble with `text` comes after `block` in the page."""
    for bubble in testid(driver, "assistant-text"):
        if text in bubble.text and driver.execute_script(
                "return arguments[0].compareDocumentPosition(arguments[1]) & Node.DOCUMENT_POSITION_FOLLOWING",
                block, bubble):
            return True
    return False


def timing(driver, label):
    """The page's paint times (ms from navigation) and the bytes it transferred."""
    return driver.execute_script("""
        const paint = {load: arguments[0]};
        for (const p of performance.getEntriesByType('paint')) paint[p.name] = Math.round(p.startTime);
        const nav = performance.getEntriesByType('navigation')[0];
        paint.dom_content_loaded = Math.round(nav.domContentLoadedEventEnd);
        paint.transfer_bytes = performance.getEntriesByType('resource').reduce((n, r) => n + r.transferSize, nav.transferSize);
        return paint;""", label)


def expand(driver, block):
    if not block.get_attribute("open"):
        block.find_element(By.TAG_NAME, "summary").click()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--ensembles", required=True)
    parser.add_argument("--pending", required=True)
    parser.add_argument("--screenshot", required=True)
    args = parser.parse_args()
    driver = browser()
    try:
        run(driver, args)
        severe = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        if severe:
            fail(f"the browser console has errors: {json.dumps(severe, indent=1)}")
        print("PASS", flush=True)
    finally:
        driver.quit()


def run(driver, args):
    # A. Two calls, in order, then the answer.
    driver.get(args.url)
    wait(driver, "the page", lambda d: testid(d, "composer"))
    print(f"timing: {json.dumps(timing(driver, 'first load, a browser just started'))}", flush=True)
    send(driver, "Compute it twice")
    first = status_of(driver, "c1", "ok")
    second = status_of(driver, "c2", "ok")
    idle(driver, "the first run to end")
    if not driver.execute_script(
            "return arguments[0].compareDocumentPosition(arguments[1]) & Node.DOCUMENT_POSITION_FOLLOWING", first, second):
        fail("c2 is shown before c1")
    if not text_after(driver, "Both are 42.", second):
        fail("the answer is not shown after both calls")
    for block in (first, second):
        expand(driver, block)
        result = block.find_element(By.CSS_SELECTOR, '[data-testid="tool-result"]').text
        if "42" not in result:
            fail(f"a result of calculate does not show 42: {result!r}")
    if "40 + 2" not in first.text or "2 * 21" not in second.text:
        fail("the expanded calls do not show their arguments")
    driver.set_window_size(1280, 1180)  # the whole exchange, the answer included
    driver.save_screenshot(args.screenshot)
    driver.set_window_size(1280, 900)
    print("A: two calls and their results in order, then the answer", flush=True)

    # B. An approval granted on the page: the call runs.
    testid(driver, "new-chat")[0].click()
    wait(driver, "an empty chat", lambda d: not testid(d, "tool-call"))
    send(driver, "Say hi")
    allow = wait(driver, "the approval buttons", lambda d: testid(d, "approve-allow"))[0]
    if call(driver, "a1").get_attribute("data-tool") != "say":
        fail("the approval is not on the call of say")
    allow.click()
    block = status_of(driver, "a1", "ok")
    expand(driver, block)
    if "hello from say" not in block.text:
        fail(f"the result of say is not shown: {block.text!r}")
    wait(driver, "the text after the approved call", lambda d: text_after(d, "Said it.", block))
    idle(driver, "the second run to end")
    print("B: an approval granted on the page ran the call", flush=True)

    # C. A denial: the call is refused and marked as such.
    send(driver, "Say it again")
    wait(driver, "the second approval", lambda d: call(d, "d1").find_elements(By.CSS_SELECTOR, '[data-testid="approve-deny"]'))
    call(driver, "d1").find_element(By.CSS_SELECTOR, '[data-testid="approve-deny"]').click()
    block = status_of(driver, "d1", "denied")
    if "error" not in block.get_attribute("class"):
        fail("the denied call is not marked as an error")
    wait(driver, "the text after the denial", lambda d: text_after(d, "Not allowed.", block))
    idle(driver, "the third run to end")
    print("C: a denied call is shown as denied", flush=True)

    # C2. A tool asks the person: a form under its call, answered on the page.
    send(driver, "Who am I?")
    form = wait(driver, "the tool's question", lambda d: call(d, "p1").find_elements(By.CSS_SELECTOR, '[data-testid="elicitation"]'))[0]
    if "What is your name?" not in form.text:
        fail(f"the question is not shown: {form.text!r}")
    name = form.find_element(By.CSS_SELECTOR, 'input[name="name"]')
    name.send_keys("Grace")
    form.find_element(By.CSS_SELECTOR, '[data-testid="elicit-accept"]').click()
    block = status_of(driver, "p1", "ok")
    expand(driver, block)
    result = block.find_element(By.CSS_SELECTOR, '[data-testid="tool-result"]').text
    if "Grace" not in result:
        fail(f"the tool did not get the answer: {result!r}")
    wait(driver, "the answer marked on the form",
         lambda d: "accept" in " ".join(a.text for a in call(d, "p1").find_elements(By.CSS_SELECTOR, '[data-testid="elicitation-answer"]')))
    wait(driver, "the text after the question", lambda d: text_after(d, "Hello, Grace.", block))
    idle(driver, "the fourth run to end")
    print("C2: a tool's question was answered in a form on the page", flush=True)

    # D. A reload of the page: the conversation reads back from the host.
    driver.get(args.url)
    wait(driver, "the page", lambda d: testid(d, "composer"))
    print(f"timing: {json.dumps(timing(driver, 'second load'))}", flush=True)
    items = wait(driver, "two conversations in the list", lambda d: len(testid(d, "conversation-item")) >= 2 and testid(d, "conversation-item"))
    items[0].find_element(By.TAG_NAME, "button").click()  # the most recently updated: B and C
    status_of(driver, "a1", "ok")
    status_of(driver, "d1", "denied")
    wait(driver, "the stored texts", lambda d: text_after(d, "Not allowed.", call(d, "d1")))
    wait(driver, "the stored question and its answer",
         lambda d: call(d, "p1").find_elements(By.CSS_SELECTOR, '[data-testid="elicitation-answer"]'))
    print("D: a stored conversation reads back with its calls and outcomes", flush=True)

    # E. The catalog follows a reload without the page reloading.
    testid(driver, "catalog-tab")[0].click()
    wait(driver, "calculate and say in the catalog",
         lambda d: {t.get_attribute("data-tool") for t in testid(d, "catalog-tool")} >= {"calculate", "say"})
    driver.execute_script("window.__noReload = 1")
    os.replace(os.path.join(args.pending, "extra.toml"), os.path.join(args.ensembles, "extra.toml"))
    wait(driver, "the new tool `sleep` in the catalog",
         lambda d: d.find_elements(By.CSS_SELECTOR, '[data-testid="catalog-tool"][data-tool="sleep"]'))
    os.replace(os.path.join(args.pending, "broken.toml"), os.path.join(args.ensembles, "broken.toml"))
    wait(driver, "the refused file with its file:line",
         lambda d: any("broken.toml:" in r.text for r in testid(d, "catalog-refused")))
    if driver.execute_script("return window.__noReload") != 1:
        fail("the page reloaded")
    driver.save_screenshot(args.screenshot.replace(".png", "-catalog.png"))
    # The chat on a phone's width, for a person to look at.
    testid(driver, "chat-tab")[0].click()
    driver.set_window_size(390, 844)
    driver.save_screenshot(args.screenshot.replace(".png", "-phone.png"))
    print("E: the catalog view followed two reloads without a page reload", flush=True)

    # F. A prompt, its argument filled in, and an attached resource start a conversation.
    driver.set_window_size(1280, 900)
    testid(driver, "new-chat")[0].click()
    wait(driver, "an empty chat", lambda d: not testid(d, "user-text"))
    wait(driver, "the prompt `brief` offered",
         lambda d: d.find_elements(By.CSS_SELECTOR, '[data-testid="prompt-pick"] option[value="brief"]'))
    Select(testid(driver, "prompt-pick")[0]).select_by_value("brief")
    wait(driver, "the prompt's argument", lambda d: testid(d, "arg-topic"))[0].send_keys("sums")
    wait(driver, "the resource offered",
         lambda d: d.find_elements(By.CSS_SELECTOR, '[data-testid="attach"] option[value="docs://brief.md"]'))
    Select(testid(driver, "attach")[0]).select_by_value("docs://brief.md")
    wait(driver, "the attachment shown", lambda d: "docs://brief.md" in testid(d, "attached")[0].text)
    testid(driver, "send")[0].click()
    wait(driver, "the prompt and the resource on the message",
         lambda d: testid(d, "user-prompt") and testid(d, "user-resource"))
    wait(driver, "the answer", lambda d: any("Summary sent." in b.text for b in testid(d, "assistant-text")))
    idle(driver, "the prompt's run to end")
    if testid(driver, "attached")[0].text or testid(driver, "prompt-args")[0].find_elements(By.TAG_NAME, "input"):
        fail("the prompt and the attachment were not cleared after sending")
    print("F: a prompt with its argument and an attached resource started a conversation", flush=True)


if __name__ == "__main__":
    main()
