"""Personal data and secrets out of the text: the ``pii`` stage.

Each detector family is one module with one function ``find(text) ->
list[Found]`` (start and end in code points of ``text``, and the value in a
canonical form for the consistent hash):

* :mod:`~stages.pii.email` — e-mail addresses (RFC 5322 dot-atom subset;
  reserved example domains of RFC 2606 / RFC 6761 kept);
* :mod:`~stages.pii.phone` — phone numbers: a cheap regex finds digit runs,
  the ``phonenumbers`` library (Google's libphonenumber metadata) validates
  them; mainland mobile and landline-with-area-code forms, ``+`` (E.164) forms
  of any country;
* :mod:`~stages.pii.resident_id` — mainland resident ID numbers (GB 11643-1999:
  18 digits with the ISO 7064 MOD 11-2 check character, region and birth
  date; the 15-digit old form only next to an ID keyword);
* :mod:`~stages.pii.bank_card` — payment card numbers (ISO/IEC 7812: Luhn check
  digit and a known issuer prefix);
* :mod:`~stages.pii.ip` — public IPv4/IPv6 addresses (``ipaddress``;
  private, loopback, link-local and documentation ranges kept);
* :mod:`~stages.pii.secrets` — PEM private key blocks and API token formats
  (AWS, GitHub, Slack, Google, OpenAI, Stripe; the gitleaks rules).

:mod:`~stages.pii.redact` resolves overlaps by a fixed priority and writes the
replacements (typed placeholders or a keyed hash); :mod:`~stages.pii.stage`
is the stage, :mod:`~stages.pii.config` its config. docs/stages/pii.md has the
sources, the defaults and the measured numbers.
"""

from stages.pii.config import Config
from stages.pii.stage import PiiStage

__all__ = ["Config", "PiiStage"]
