"""Signing in to the web chat in a real browser: Debian's headless Chromium through its
chromedriver, against a `toolhost serve --http` whose `[access.oidc.sign-in]` names
oidc-provider (tests/oidc/provider.mjs, with its own login and consent pages).

Run by `access_sign_in::the_web_chat_signs_people_in_with_the_provider_in_a_real_browser`:

    signin.py --url http://127.0.0.1:PORT/ --login alice --expect-reply "Hello, Alice."

Steps: the page asks how to sign in and offers the provider; the provider's login (any login
and password) and consent pages; back on the page, signed in as LOGIN with no conversation
listed (another identity's exist); a message answered by the scripted model, and the
conversation listed; sign-out, after which the page asks again and the API refuses the
browser. Prints one line per step passed; exits 1 with the reason on the first failure.
"""

import argparse
import sys

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from webchat import browser, fail, idle, testid, wait


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--login", required=True)
    parser.add_argument("--expect-reply", required=True)
    args = parser.parse_args()
    driver = browser()
    try:
        driver.get(args.url)
        sign_in = wait(driver, "the offer to sign in",
                       lambda d: [e for e in testid(d, "sign-in") if e.is_displayed()])[0]
        print("the page offers to sign in with the provider", flush=True)
        sign_in.click()

        login = wait(driver, "the provider's login page", lambda d: d.find_elements(By.NAME, "login"))[0]
        login.send_keys(args.login)
        driver.find_element(By.NAME, "password").send_keys("any password")
        driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait(driver, "the provider's consent page",
             lambda d: d.find_elements(By.XPATH, "//button[normalize-space()='Continue']"))[0].click()
        print("signed in at the provider (login and consent)", flush=True)

        who = wait(driver, "the page to say who is signed in",
                   lambda d: [e for e in testid(d, "who") if e.is_displayed() and e.text])[0]
        if who.text != f"Signed in as {args.login}":
            fail(f"the page says {who.text!r}")
        if not testid(driver, "sign-out")[0].is_displayed():
            fail("no sign-out button")
        listed = driver.find_elements(By.CSS_SELECTOR, "#conversations li")
        if listed:
            fail(f"another identity's conversations are listed: {[e.text for e in listed]}")
        print(f"back on the page as {args.login}, no conversation of anyone else's", flush=True)

        composer = testid(driver, "composer")[0]
        composer.send_keys("Hello")
        composer.send_keys(Keys.ENTER)
        wait(driver, f"the reply {args.expect_reply!r}",
             lambda d: args.expect_reply in d.find_element(By.TAG_NAME, "body").text)
        idle(driver, "the run to end")
        wait(driver, "the conversation in the list",
             lambda d: len(d.find_elements(By.CSS_SELECTOR, "#conversations li")) == 1)
        print("a conversation started and listed", flush=True)

        testid(driver, "sign-out")[0].click()
        wait(driver, "the offer to sign in again",
             lambda d: [e for e in testid(d, "sign-in") if e.is_displayed()])
        status = driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "fetch('/api/conversations').then((r) => done(r.status), () => done(0));")
        if status != 401:
            fail(f"after signing out the API answered {status}, not 401")
        print("signed out: the page asks again and the API refuses the browser", flush=True)
    finally:
        driver.quit()


if __name__ == "__main__":
    sys.exit(main())
