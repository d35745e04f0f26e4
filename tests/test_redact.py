"""Redaction: key-like patterns with their near misses, literal scrubbing of configured
values, JSON walking, URL credentials. Every expected value below is written by hand."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from trajectory_compressor.core import redact as redact_module
from trajectory_compressor.core.redact import (
    REDACTED,
    Scrubber,
    redact,
    scrub_literals,
    strip_url_credentials,
)

PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----"

# Replaced whole.
TOKEN_CASES = [
    (f"key:\n{PEM}\ndone", "key:\n[REDACTED]\ndone"),
    ("cut -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk", "cut [REDACTED]"),
    ("-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF\n-----END PGP PRIVATE KEY BLOCK-----",
     "[REDACTED]"),
    ("jwt=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl;", "jwt=[REDACTED];"),
    ("used sk-test-abc123 here", "used [REDACTED] here"),
    ("key sk-abcdefghijklmnopqrst.", "key [REDACTED]."),
    ("sk-proj-abcdefghijklmnopqrstuvwx1234", "[REDACTED]"),
    ("sk-ant-api03-AbC_dEf-123", "[REDACTED]"),
    ("gh ghp_abcdefghijklmnopqrstuvwxyz0123456789 ok", "gh [REDACTED] ok"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijkl", "[REDACTED]"),
    ("gl glpat-abcdefghij0123456789", "gl [REDACTED]"),
    ("aws AKIAIOSFODNN7EXAMPLE,", "aws [REDACTED],"),
    ("ASIAY34FZKBOKMUTVV7A", "[REDACTED]"),
    ("slack xoxb-1234567890-abcdefghij", "slack [REDACTED]"),
    ("google AIzaSyA1234567890abcdefghijklmnopqrstuv", "google [REDACTED]"),
    ("hf hf_abcdefghijklmnopqrstuvwxyz0123456789", "hf [REDACTED]"),
    ("stripe sk_live_abcdefghij0123456789", "stripe [REDACTED]"),
    ("stripe rk_test_abcdefghij0123456789", "stripe [REDACTED]"),
]

# A name, a flag or a scheme is kept; only the value becomes the marker.
KEYED_CASES = [
    ("postgres://admin:hunter2@db.internal:5432/prod",
     "postgres://[REDACTED]@db.internal:5432/prod"),
    ("see https://user:pa@ss@host:8443/v1?x=1 now", "see https://[REDACTED]@host:8443/v1?x=1 now"),
    ("redis://:pw0rd@localhost:6379/0", "redis://[REDACTED]@localhost:6379/0"),
    ("ftp://anon:guest@ftp.example.org/pub", "ftp://[REDACTED]@ftp.example.org/pub"),
    ("curl -H 'Bearer abc.def.123456'", "curl -H 'Bearer [REDACTED]'"),
    ("bearer abcdefghijklmnopqrstuvwxyz", "bearer [REDACTED]"),
    ("Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic [REDACTED]"),
    ('"authorization": "Token abcdef"', '"authorization": "Token [REDACTED]"'),
    ("authorization=opaque-1234", "authorization=[REDACTED]"),
    ("cli --password hunter2 -v", "cli --password [REDACTED] -v"),
    ("cli --db-password='a b c'", "cli --db-password='[REDACTED]'"),
    ("mysql -u root -pS3cret! mydb", "mysql -u root -p[REDACTED] mydb"),
    ('mysqldump -h db -P3306 -p"s e c" db', 'mysqldump -h db -P3306 -p"[REDACTED]" db'),
    ("mycli -u root -pS3cret db", "mycli -u root -p[REDACTED] db"),
    ("sshpass -p 'pw word' ssh -p 22 host", "sshpass -p '[REDACTED]' ssh -p 22 host"),
    ("sshpass -phunter2 scp a b", "sshpass -p[REDACTED] scp a b"),
    ("password=hunter2.", "password=[REDACTED]."),
    ("passwd: abc", "passwd: [REDACTED]"),
    ('{"password": "x\\"y", "user": "bob"}', '{"password": "[REDACTED]", "user": "bob"}'),
    ('{\\"password\\": \\"pw1\\"}', '{\\"password\\": \\"[REDACTED]\\"}'),
    ("DB_PASSWORD=hunter2 ./run", "DB_PASSWORD=[REDACTED] ./run"),
    ("client_secret: 'abc'", "client_secret: '[REDACTED]'"),
    ("export OPENAI_API_KEY=abc123xyz", "export OPENAI_API_KEY=[REDACTED]"),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG", "aws_secret_access_key = [REDACTED]"),
    ("access_token=abc123&state=1", "access_token=[REDACTED]&state=1"),
    ("$conf = ['password' => 'pw'];", "$conf = ['password' => '[REDACTED]'];"),
    ("pwd := \"x\"; secret_key := s3", "pwd := \"x\"; secret_key := [REDACTED]"),
    ("GET /v1?key=abc&page=2&token=xyz#frag",
     "GET /v1?key=[REDACTED]&page=2&token=[REDACTED]#frag"),
    ("/s3/obj?X-Amz-Signature=0a1b2c", "/s3/obj?X-Amz-Signature=[REDACTED]"),
]

# Ordinary prose and code that looks a little like a secret.
NEAR_MISSES = [
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq\n-----END PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----",
    "header eyJhbGciOiJIUzI1NiJ9 only; eyJ.ab.cd",
    "pip install sk-learn; import sk-learn-v1.2; sk-abc12; task-12345678",
    "sk-abcdefghijklmnopqrs",  # 19 letters, no digit
    "ghp_short1 github_pat_short glpat-short",
    "AKIAIOSFODNN7EXAMPL AKIAIOSFODNN7EXAMPLES",
    "xoxb-12345 AIzaShort hf_hub_download hf_transfer",
    "pk_live_abcdefghij0123456789 sk_test_short",
    "ssh://git@github.com/org/repo.git and mail bob@example.com",
    "http://localhost:8080/v1 and https://example.com/@me",
    "a Bearer token; Bearer authentication; Authorization header; Authorization: required",
    "docker run -p 8080:80 nginx",
    "docker run -u 1000 -p8080:80/tcp nginx",
    "ssh -p 22 host; ssh -p22 host; mkdir -p /tmp/x; patch -p1 < fix.diff",
    "pytest -pno:cacheprovider; gcc -pthread -pedantic",
    "mysql -u root -p mydb",
    "mysql -u root -p$MYSQL_PWD",
    "echo $PW | docker login --password-stdin; cli --password $PW; cli --password-file f",
    "password_reset_view and passwords: 3 rotated; password reset: done",
    "def login(user: str, password: str = None) -> bool:",
    "password: Optional[str]; password = getpass.getpass(); password = os.environ['PW']",
    "if password == expected: return",
    "max_tokens: 400, eos_token: </s>, pad_token: <pad>, valid_token = check(x)",
    "api_key_env: OPENAI_API_KEY; api_key: ${OPENAI_API_KEY}; password: {{ vault_pw }}",
    "password: null; api_key: true; password=<your password>",
    "GET /v1?keyboard=1&monkey=2&page=3&key_id=4",
    "password:\nnext: line",
    "password :: x",
]


@pytest.mark.parametrize(("text", "expected"), TOKEN_CASES + KEYED_CASES)
def test_each_pattern_redacts_its_example(text, expected):
    assert redact(text) == expected


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_are_left_alone(text):
    assert redact(text) == text


def test_every_pattern_is_exercised_by_an_example():
    examples = [text for text, _ in TOKEN_CASES + KEYED_CASES]
    patterns = [*redact_module._TOKENS, *redact_module._KEYED]
    assert len(patterns) == 21
    for pattern in patterns:
        assert any(pattern.search(text) for text in examples), pattern.pattern


def test_a_bearer_jwt_becomes_one_marker():
    assert redact("Bearer eyJhbGciOiJIUzI1NiJ9.abc.def") == "Bearer [REDACTED]"
    assert REDACTED == "[REDACTED]"


FRAGMENTS = [text for text, _ in TOKEN_CASES + KEYED_CASES] + NEAR_MISSES


@settings(deadline=None)
@given(st.lists(st.tuples(st.sampled_from(FRAGMENTS), st.sampled_from([" ", "\n", "", ", "]))))
def test_redaction_is_idempotent(pieces):
    text = "".join(fragment + separator for fragment, separator in pieces)
    once = redact(text)
    assert redact(once) == once


# Literal scrubbing of configured values.

def test_a_secret_inside_a_larger_word():
    assert scrub_literals("prefixHUNTER22suffix", ["HUNTER22"]) == "prefix[REDACTED]suffix"


def test_several_secrets():
    text = "alpha-key and beta-key, alpha-key again"
    assert (scrub_literals(text, ["alpha-key", "beta-key"])
            == "[REDACTED] and [REDACTED], [REDACTED] again")


def test_overlapping_and_nested_secrets_become_one_marker():
    assert scrub_literals("xabcdefghiy", ["abcdef", "defghi"]) == "x[REDACTED]y"
    assert scrub_literals("abcdefgh abcd", ["abcd", "abcdefgh"]) == "[REDACTED] [REDACTED]"
    assert scrub_literals("aaaaaaa", ["aaaa"]) == "[REDACTED]"


def test_regex_metacharacters_are_literal():
    secret = "p.a$s*(w)[0]+?"
    assert scrub_literals(f"x {secret} y", [secret]) == "x [REDACTED] y"
    assert scrub_literals("pXa$s*(w)[0]+?", [secret]) == "pXa$s*(w)[0]+?"


def test_unicode_secret_and_its_escaped_forms():
    secret = "clé-秘密-🔑"
    assert scrub_literals(f"key={secret}!", [secret]) == "key=[REDACTED]!"
    assert scrub_literals(json.dumps({"k": secret}), [secret]) == '{"k": "[REDACTED]"}'
    encoded = "https://x/?k=cl%C3%A9-%E7%A7%98%E5%AF%86-%F0%9F%94%91&z=1"
    assert scrub_literals(encoded, [secret]) == "https://x/?k=[REDACTED]&z=1"


def test_short_and_empty_values_are_ignored_and_padding_is_stripped():
    text = "abc and ab and a b"
    assert scrub_literals(text, ["", "abc", "  ab  ", "   "]) == text
    assert scrub_literals("tok hunter22 end", ["  hunter22\n"]) == "tok [REDACTED] end"
    assert scrub_literals("tok", []) == "tok"


def test_a_marker_never_completes_a_secret():
    # "[REDACTED]" followed by "xy" would spell the second secret "D]xy".
    assert scrub_literals("zzzzxy!", ["zzzz", "D]xy"]) == "[REDACTED]!"


# The Scrubber: configured values, then patterns.

def test_a_scrubber_scrubs_literally_then_by_pattern():
    scrub = Scrubber(["my-own-key-0001", "plainvalue"])
    text = "used my-own-key-0001x, plainvalue and ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    assert scrub(text) == "used [REDACTED]x, [REDACTED] and [REDACTED]"
    assert scrub.literal("password=hunter2 plainvalue") == "password=hunter2 [REDACTED]"
    assert Scrubber()("password=hunter2") == "password=[REDACTED]"


def test_scrub_value_walks_json_including_keys_without_touching_the_input():
    scrub = Scrubber(["KEY-12345"])
    row = {"conversations": [{"from": "human", "value": "my key is KEY-12345."}],
           "KEY-12345": ("a", 1, None, 2.5, True),
           "meta": {"password=hunter2": "KEY-12345KEY-12345", 7: ["xKEY-12345"]}}
    before = copy.deepcopy(row)
    assert scrub.scrub_value(row) == {
        "conversations": [{"from": "human", "value": "my key is [REDACTED]."}],
        "[REDACTED]": ("a", 1, None, 2.5, True),
        "meta": {"password=hunter2": "[REDACTED]", 7: ["x[REDACTED]"]}}
    assert row == before
    assert scrub.scrub_value(12) == 12 and scrub.scrub_value(None) is None


def test_no_secrets_is_the_identity():
    row = {"conversations": [{"value": "password=hunter2"}]}
    for scrub in (Scrubber(), Scrubber(["", "ab"])):
        assert not scrub
        assert scrub.scrub_value(row) is row
        assert scrub.literal("password=hunter2") == "password=hunter2"
    assert Scrubber(["abcd"])


def test_a_scrubber_never_shows_its_values():
    scrub = Scrubber(["super-secret-value"])
    assert "super" not in repr(scrub) and "super" not in str(scrub)


# Stored URLs.

@pytest.mark.parametrize(("url", "expected"), [
    ("https://user:pw@host:8443/v1?x=1", "https://host:8443/v1?x=1"),
    ("https://tok@github.com/org/repo.git", "https://github.com/org/repo.git"),
    ("postgres://admin:p@ss@db:5432/prod", "postgres://db:5432/prod"),
    ("//user:pw@host/x", "//host/x"),
    ("https://api.example.com/v1?api_key=abc&model=m&Access-Token=x#frag",
     "https://api.example.com/v1?api_key=REDACTED&model=m&Access-Token=REDACTED#frag"),
    ("https://h/v1?key=abc&keyboard=1&monkey=2&token=t",
     "https://h/v1?key=REDACTED&keyboard=1&monkey=2&token=REDACTED"),
    ("https://h/?api%5Fkey=abc", "https://h/?api%5Fkey=REDACTED"),
    ("https://u:p@h/?sig=abc#x?token=y", "https://h/?sig=REDACTED#x?token=y"),
])
def test_url_credentials_are_stripped(url, expected):
    assert strip_url_credentials(url) == expected


@pytest.mark.parametrize("url", [
    "https://host:8443/v1?x=1",
    "http://Host/a%2Fb?&x=&y#frag",
    "http://host/path?",
    "https://h/?key=",
    "https://host/users/@me?x=1",
    "localhost:8000/v1",
    "",
])
def test_urls_without_credentials_are_unchanged(url):
    assert strip_url_credentials(url) == url


# Properties.

@settings(deadline=None)
@given(st.text(), st.text(min_size=4), st.text(), st.text())
def test_an_inserted_secret_never_survives(before, secret, middle, after):
    assume(len(secret.strip()) >= 4 and secret not in REDACTED)
    text = before + secret + middle + secret + after
    assert secret not in scrub_literals(text, [secret])
    assert secret not in Scrubber([secret])(text)
    [(key, [value])] = Scrubber([secret]).scrub_value({text: [text]}).items()
    assert secret not in key and secret not in value


@settings(deadline=None)
@given(st.text(alphabet="abc \n"), st.text(alphabet="xyz", min_size=4))
def test_text_without_the_secret_is_unchanged(text, secret):
    assert scrub_literals(text, [secret]) == text
