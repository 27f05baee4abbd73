// The gradient of Caffe2's Do op from TypeScript: Node's built-in fetch, JSON both ways.
//
//   npm install && npm start                  # server at http://127.0.0.1:8000
//   NETGRAD_URL=http://host:port npm start
//
// The Do op runs Add([X, Y] -> Z) in its own workspace W, bound to the outer blobs
// outer_X, outer_Y and outer_Z (Caffe2's do_op_test). We give the gradient of outer_Z and
// none for the workspace output, and get one gradient entry per input of the op.

// Node's globals used here (declared, so no @types/node is needed; fetch comes from lib DOM).
declare const process: { env: Record<string, string | undefined>; exit(code: number): never };

/** A gradient entry: none, a dense blob, or a sparse GradientSlice. */
type Gradient = null | string | { indices: string; values: string };

interface Argument {
  name: string;
  i?: number | string;
  f?: number;
  s?: string;
  ints?: (number | string)[];
  strings?: string[];
  n?: NetDef;
}

interface OperatorDef {
  type: string;
  input?: string[];
  output?: string[];
  arg?: Argument[];
  is_gradient_op?: boolean;
}

interface NetDef {
  name?: string;
  op: OperatorDef[];
}

interface Diagnostic {
  severity: string;
  code: string;
  message: string;
  path: string | null;
}

interface OpGradientResponse {
  grad_ops: OperatorDef[];
  g_input: Gradient[];
  diagnostics: Diagnostic[];
}

/** RFC 9457 problem document: every offending item in `errors`. */
interface Problem {
  title: string;
  status: number;
  detail: string;
  errors: { code: string; message: string; path: string | null }[];
}

const doOp: OperatorDef = {
  type: "Do",
  input: ["outer_X", "outer_Y", "W"],
  output: ["outer_Z", "W"],
  arg: [
    { name: "net", n: { name: "subnet", op: [{ type: "Add", input: ["X", "Y"], output: ["Z"] }] } },
    { name: "inner_blobs", strings: ["X", "Y", "Z"] },
    { name: "outer_blobs_idx", ints: [0, 1, 2] },
  ],
};

async function gradientOfOp(
  url: string,
  op: OperatorDef,
  gOutput: Gradient[],
): Promise<OpGradientResponse> {
  const response = await fetch(`${url}/v1/gradients/op`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify({ op, g_output: gOutput }),
  });
  if (!response.ok) {
    const problem = (await response.json()) as Problem;
    const lines = problem.errors.map((e) => `  - ${e.path ?? ""} ${e.message}`);
    throw new Error(`${problem.status} ${problem.title}: ${problem.detail}\n${lines.join("\n")}`);
  }
  return (await response.json()) as OpGradientResponse;
}

async function main(): Promise<void> {
  const url = process.env.NETGRAD_URL ?? "http://127.0.0.1:8000";
  const res = await gradientOfOp(url, doOp, ["outer_Z_grad", null]);
  doOp.input!.forEach((blob, k) => console.log(`${blob} -> ${JSON.stringify(res.g_input[k])}`));
  for (const op of res.grad_ops) {
    console.log(`${op.type}(${(op.input ?? []).join(", ")}) -> ${(op.output ?? []).join(", ")}`);
  }
}

main().catch((err: Error) => {
  console.error(err.message);
  process.exit(1);
});
