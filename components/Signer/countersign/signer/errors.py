"""The Signer's own errors (the plan-signature errors are the Kernel's ``SignatureError`` tree).

::

    SignatureError (Kernel)            signature_error
    └── ReceiptInvalidError            receipt_invalid          a receipt link does not hold
    InputError (Kernel)                invalid_input
    └── ReceiptBundleError             receipt_bundle_malformed not a bundle at all
"""

from __future__ import annotations

from countersign.kernel import InputError, SignatureError

__all__ = ["ReceiptBundleError", "ReceiptInvalidError"]


class ReceiptInvalidError(SignatureError):
    """A receipt of a bundle does not verify; the message names the first bad link
    (``receipt 3 (gate-B approved): previous_receipt_hash does not match receipt 2``)."""

    code = "receipt_invalid"


class ReceiptBundleError(InputError):
    """The document is not a receipt bundle: not an object with exactly ``signed_plan``,
    ``receipts`` and ``public_keys`` of the right kinds, or a public key that is not 32 bytes of
    standard base64."""

    code = "receipt_bundle_malformed"
