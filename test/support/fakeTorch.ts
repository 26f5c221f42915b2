/**
 * A FAKE torch for tests of the trainer's environment (the real one, several GB, cannot be downloaded in tests): a
 * wheel named torch with `torch.__version__` and the `torch.cuda` functions the probe calls, nothing else.
 */
import { execa } from 'execa';

/** Writes a FAKE torch wheel (a stand-in for tests: torch.__version__ and the torch.cuda functions the probe calls). */
export async function fakeTorchWheel(dir: string, version: string): Promise<void> {
  const script = `
import sys, zipfile, base64, hashlib
out, version = sys.argv[1], sys.argv[2]
files = {
  "torch/__init__.py": "# FAKE torch for Search Agent Studio's tests (not PyTorch)\\n__version__ = %r\\nclass cuda:\\n    is_available = staticmethod(lambda: False)\\n    device_count = staticmethod(lambda: 0)\\n" % version,
  "torch-%s.dist-info/METADATA" % version: "Metadata-Version: 2.1\\nName: torch\\nVersion: %s\\nSummary: FAKE torch for tests\\n" % version,
  "torch-%s.dist-info/WHEEL" % version: "Wheel-Version: 1.0\\nGenerator: sas-tests\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
}
record = "torch-%s.dist-info/RECORD" % version
lines = []
for name, text in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
    lines.append("%s,sha256=%s,%d" % (name, digest, len(text.encode())))
lines.append(record + ",,")
with zipfile.ZipFile("%s/torch-%s-py3-none-any.whl" % (out, version), "w") as z:
    for name, text in files.items():
        z.writestr(name, text)
    z.writestr(record, "\\n".join(lines) + "\\n")
`;
  await execa('python3', ['-c', script, dir, version]);
}
