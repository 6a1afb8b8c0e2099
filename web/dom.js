// Changing what the page shows without new nodes: on a keystroke, a text
// node whose data changes costs layout only, where a new node would also need
// styling (the token strip has hundreds).

// Sets a text node's data, if it differs.
export function setData(node, text) {
  if (node.data !== text) node.data = text;
}
